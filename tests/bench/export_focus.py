"""Export benchmark: stream N usage lines as FOCUS CSV and JSON Lines to a null sink; print
rows/s, peak traced memory (tracemalloc) and RSS growth for a small and a large size.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpupool_bench_billing \\
        python -m tests.bench.export_focus --rows 1000000

Migrates the database, then loads synthetic usage once per size (tenant ``bench-<n>``,
reused on later runs while it holds exactly ``n`` lines): on PostgreSQL with one
``INSERT … SELECT … FROM generate_series(…)``, elsewhere with ``bulk_create`` in batches.

Each export is run twice: once plain, for the throughput (wall-clock rows/s, and rows per
CPU-second of this process, which depends less on the machine's load; the database server's
CPU is not counted) and the RSS growth (current RSS sampled while streaming, minus RSS
before); once under tracemalloc, for the peak traced memory (tracing slows Python down, so
its rows/s is not the figure to quote). Flat memory = the same peaks for both sizes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

HOURS_PER_LEASE = 24 * 30
START = datetime(2026, 1, 1, tzinfo=UTC)
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _ensure_database(url: str) -> None:
    """Create the benchmark's PostgreSQL database when it does not exist yet."""
    from urllib.parse import urlparse

    if not url.startswith(("postgres://", "postgresql://")):
        return
    import psycopg

    name = urlparse(url).path.lstrip("/")
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    _ensure_database(os.environ.get("DATABASE_URL", ""))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def _rss_mib() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * PAGE / 2**20
    except OSError:  # not Linux: fall back to the peak
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _load_pg(tenant: Any, lease_ids: list[Any], n: int) -> None:
    from django.db import connection

    from portal.billing.models import UsageRecord

    meta = UsageRecord._meta
    cols = ["lease_id", "tenant_id", "period_start", "period_end", "used_from", "used_to",
            "seconds", "gpus", "gpu_model", "priority", "currency", "list_unit_price",
            "unit_price", "list_cost", "cost", "closed", "gpu_util_avg", "updated"]
    cols = [meta.get_field(c.removesuffix("_id")).column for c in cols]
    h = "(i %% %(per)s)"
    sql = (f"INSERT INTO {meta.db_table} ({', '.join(cols)}) "
           f"SELECT (%(ids)s::uuid[])[i / %(per)s + 1], %(tenant)s, "
           f"%(start)s + {h} * interval '1 hour', %(start)s + ({h} + 1) * interval '1 hour', "
           f"%(start)s + {h} * interval '1 hour', %(start)s + ({h} + 1) * interval '1 hour', "
           "3600, 8, 'H100', 'reserved', 'USD', 2.0000, 1.8000, 16.00, 14.40, true, "
           "CASE WHEN i %% 4 = 0 THEN NULL ELSE (i %% 10000) / 100.0 END, now() "
           "FROM generate_series(0, %(n)s - 1) AS i")
    with connection.cursor() as cur:
        cur.execute(sql, {"ids": lease_ids, "per": HOURS_PER_LEASE, "tenant": tenant.pk,
                          "start": START, "n": n})
        cur.execute(f"ANALYZE {meta.db_table}")


def _load_orm(tenant: Any, lease_ids: list[Any], n: int) -> None:
    from portal.billing.models import UsageRecord

    def rows() -> Iterator[UsageRecord]:
        for i in range(n):
            at = START + timedelta(hours=i % HOURS_PER_LEASE)
            yield UsageRecord(lease_id=lease_ids[i // HOURS_PER_LEASE], tenant=tenant,
                              period_start=at, period_end=at + timedelta(hours=1),
                              used_from=at, used_to=at + timedelta(hours=1), seconds=3600,
                              gpus=Decimal(8), gpu_model="H100", priority="reserved",
                              currency="USD", list_unit_price=Decimal("2.0000"),
                              unit_price=Decimal("1.8000"), list_cost=Decimal("16.00"),
                              cost=Decimal("14.40"), closed=True,
                              gpu_util_avg=None if i % 4 == 0 else Decimal(i % 10000) / 100)

    it = rows()
    while batch := [r for _, r in zip(range(20_000), it, strict=False)]:
        UsageRecord.objects.bulk_create(batch, batch_size=5000)


def _ensure_rows(n: int, reload: bool = False) -> tuple[Any, datetime, datetime]:
    from django.db import connection, transaction

    from portal.billing.models import UsageRecord
    from portal.leasing.models import Lease
    from portal.tenants.models import Tenant

    tenant, _ = Tenant.objects.get_or_create(slug=f"bench-{n}", defaults={"name": f"Bench {n}"})
    end = START + timedelta(days=3650)
    have = UsageRecord.objects.filter(tenant=tenant).count()
    if have == n and not reload:
        return tenant, START, end
    t = time.perf_counter()
    with transaction.atomic():
        UsageRecord.objects.filter(tenant=tenant).delete()
        Lease.objects.filter(tenant=tenant).delete()
        leases = [Lease(tenant=tenant, start_at=START, active_at=START, state="active",
                        end_at=START + timedelta(hours=HOURS_PER_LEASE), gpu_model="H100",
                        allowed_models=["H100"], gpu_count=8, priority="reserved",
                        name=f"bench {k}", tags={"bench": "1", "team": f"t{k % 7}"})
                  for k in range(-(-n // HOURS_PER_LEASE))]
        Lease.objects.bulk_create(leases, batch_size=2000)
        ids = [lease.pk for lease in leases]
        (_load_pg if connection.vendor == "postgresql" else _load_orm)(tenant, ids, n)
    print(f"  loaded {n:,} rows ({len(ids):,} leases) in {time.perf_counter() - t:.1f} s "
          f"({connection.vendor})", flush=True)
    return tenant, START, end


def _stream(export: Callable[..., Iterator[str]], tenant: Any, start: datetime,
            end: datetime, *, trace: bool) -> dict[str, float]:
    import gc

    gc.collect()
    rss0 = _rss_mib()
    rss_peak = rss0
    if trace:
        tracemalloc.start()
    cpu, t = time.process_time(), time.perf_counter()
    lines = size = chunks = 0
    for chunk in export(tenant=tenant, start=start, end=end):  # the null sink
        lines += chunk.count("\n")
        size += len(chunk)
        chunks += 1
        if chunks % 64 == 0:
            rss_peak = max(rss_peak, _rss_mib())
    elapsed, cpu = time.perf_counter() - t, time.process_time() - cpu
    peak = 0
    if trace:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    rss_peak = max(rss_peak, _rss_mib())
    return {"lines": lines, "seconds": elapsed, "cpu": cpu, "peak_traced_mib": peak / 2**20,
            "rss_growth_mib": rss_peak - rss0, "mib_out": size / 2**20, "chunks": chunks}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=100_000)
    parser.add_argument("--formats", default="focus-csv,focus-jsonl")
    parser.add_argument("--trace", default="focus-csv",
                        help="formats also run under tracemalloc ('' = none; slow: tracing "
                             "costs several times the export's own CPU)")
    parser.add_argument("--reload", action="store_true", help="reload the synthetic rows")
    args = parser.parse_args(argv)
    _setup()
    from django.db import connection

    from portal.billing import exports

    print(f"database: {connection.vendor} {connection.settings_dict['NAME']}; "
          f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}", flush=True)
    sizes = {n: _ensure_rows(n, args.reload) for n in (args.small, args.rows)}
    runs = [(fmt, n, False) for fmt in args.formats.split(",") for n in sizes]
    runs += [(fmt, n, True) for fmt in args.trace.split(",") if fmt for n in sizes]
    for fmt, n, trace in runs:  # plain runs first, the slow traced ones last
        tenant, start, end = sizes[n]
        load = os.getloadavg()[0]
        r = _stream(exports.WRITERS[fmt], tenant, start, end, trace=trace)
        rows = r["lines"] - (1 if fmt.endswith("csv") else 0)
        memory = (f"peak traced {r['peak_traced_mib']:5.1f} MiB" if trace
                  else f"RSS growth {r['rss_growth_mib']:5.1f} MiB")
        print(f"{fmt:<11} {rows:>9,} rows{' (tracemalloc)' if trace else '':<14}: "
              f"{r['seconds']:6.1f} s {rows / r['seconds']:>8,.0f} rows/s "
              f"({rows / max(r['cpu'], 1e-9):>7,.0f} rows/CPU-s)  {memory}  "
              f"{r['mib_out']:,.0f} MiB out in {r['chunks']:,} chunks  "
              f"load {load:.1f}→{os.getloadavg()[0]:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
