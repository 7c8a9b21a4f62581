"""Export benchmark: stream N usage lines as FOCUS CSV; print rows/s and peak memory.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpupool_bench_billing \
        python -m tests.bench.export_focus --rows 1000000

Creates the database (PostgreSQL) if needed, migrates, bulk-loads synthetic usage once per
size (reused on later runs), then streams the export for 100k and for ``--rows`` lines to a
null sink. Peak memory is the process's peak RSS growth during each export (tracemalloc too).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from decimal import Decimal


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def _ensure_rows(n: int) -> tuple[object, datetime, datetime]:
    from portal.billing.models import UsageRecord
    from portal.leasing.models import Lease
    from portal.tenants.models import Tenant

    tenant, _ = Tenant.objects.get_or_create(slug=f"bench-{n}", defaults={"name": f"Bench {n}"})
    start = datetime(2026, 1, 1, tzinfo=UTC)
    have = UsageRecord.objects.filter(tenant=tenant).count()
    if have >= n:
        return tenant, start, start + timedelta(days=3650)
    per_lease = 24 * 30
    t = time.perf_counter()
    made = have
    while made < n:
        lease = Lease.objects.create(tenant=tenant, start_at=start, end_at=start + timedelta(
            hours=per_lease), active_at=start, state="active", gpu_model="H100",
            gpu_count=8, priority="reserved", tags={"bench": "1"})
        batch = [UsageRecord(lease=lease, tenant=tenant, period_start=start + timedelta(hours=h),
                             period_end=start + timedelta(hours=h + 1),
                             used_from=start + timedelta(hours=h),
                             used_to=start + timedelta(hours=h + 1), seconds=3600,
                             gpus=Decimal(8), gpu_model="H100", priority="reserved",
                             currency="USD", list_unit_price=Decimal("2.0000"),
                             unit_price=Decimal("1.8000"), list_cost=Decimal("16.00"),
                             cost=Decimal("14.40"), closed=True)
                 for h in range(min(per_lease, n - made))]
        UsageRecord.objects.bulk_create(batch, batch_size=5000)
        made += len(batch)
    print(f"  loaded {n - have} rows in {time.perf_counter() - t:.1f} s", flush=True)
    return tenant, start, start + timedelta(days=3650)


def _run(n: int) -> dict[str, float]:
    from portal.billing.exports import focus_csv

    tenant, start, end = _ensure_rows(n)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    t = time.perf_counter()
    rows = -1
    size = 0
    for chunk in focus_csv(tenant=tenant, start=start, end=end):
        rows += 1
        size += len(chunk)
    elapsed = time.perf_counter() - t
    _cur, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"rows": rows, "seconds": elapsed, "rows_per_s": rows / elapsed,
            "peak_traced_mib": peak / 2**20, "rss_growth_mib": (rss1 - rss0) / 1024,
            "peak_rss_mib": rss1 / 1024, "mib_out": size / 2**20}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=100_000)
    args = parser.parse_args(argv)
    _setup()
    from django.db import connection

    print(f"database: {connection.vendor} {connection.settings_dict['NAME']}", flush=True)
    for n in (args.small, args.rows):
        r = _run(n)
        print(f"FOCUS CSV {r['rows']:>9,} rows: {r['seconds']:7.1f} s  "
              f"{r['rows_per_s']:>9,.0f} rows/s  peak traced {r['peak_traced_mib']:6.1f} MiB  "
              f"RSS growth {r['rss_growth_mib']:6.1f} MiB  peak RSS {r['peak_rss_mib']:6.1f} MiB"
              f"  output {r['mib_out']:.0f} MiB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
