"""Benchmark: the portal's side of a scheduling pass — the snapshot from PostgreSQL.

    python -m tests.bench.pass_snapshot [--nodes 1000 5000 10000] [--queue 1 1000 5000]

``DATABASE_URL`` (default ``postgres://postgres@127.0.0.1:5432/gpupool_bench``) is
created and migrated. Per cluster size it seeds ``generate_cluster`` nodes (8 x H100,
32 per leaf), about 40% of the GPUs held by running leases (one allocation row per
eighth of a GPU, as the portal writes them), ``--history`` ended leases per node (the
fair-share history) and the queue. Printed per row (milliseconds, best of ``--repeat``):

- ``cold`` (wall; ``_cpu``: this process's CPU): ``allocation.snapshot()`` after the scheduler cache was dropped (what the
  first pass of a worker pays, and every pass before the cache existed);
- ``warm``: the same call again (the cache validated and reused, leases and usage read);
- ``quote``: ``allocation.preview`` of one order, twice in a row (the second within the
  quote snapshot's lifetime);
- ``requests``: turning the queue (``--queue`` leases, read with their tenant) into the
  core's requests;
- ``schedule``: ``allocation.schedule(queue)`` — snapshot plus the core's pass, warm.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from tests.bench.ingest import ensure_database, manage

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/gpupool_bench"
TENANTS = 7
TABLES = ("leasing_allocation", "leasing_leaseevent", "leasing_lease", "leasing_quota",
          "inventory_hcaport", "inventory_gpu", "inventory_node", "inventory_switchlink",
          "inventory_switch", "inventory_fabric")


def best(fn: Callable[[], object], repeat: int, before: Callable[[], object] | None = None,
         ) -> float:
    return timed(fn, repeat, before)[0]


def timed(fn: Callable[[], object], repeat: int, before: Callable[[], object] | None = None,
          ) -> tuple[float, float]:
    """Best wall ms and best CPU ms of this process (the database's own CPU not counted;
    on a loaded machine wall time is mostly waiting for a core)."""
    wall = cpu = float("inf")
    for _ in range(repeat):
        if before is not None:
            before()
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        wall = min(wall, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
    return round(wall * 1000, 1), round(cpu * 1000, 1)


def reset() -> None:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(f"TRUNCATE {', '.join(TABLES)} CASCADE")


def seed(nodes: int, history: int, rng: random.Random) -> list[Any]:
    """The cluster, running leases (~40% of GPUs) and ended ones; returns the tenants."""
    from portal.core import clock
    from portal.inventory.generator import ClusterSpec, cluster_generate
    from portal.inventory.models import Gpu
    from portal.leasing.models import SLOTS_PER_GPU, Allocation, Lease, Quota
    from portal.tenants.models import Tenant

    cluster_generate(actor=None, spec=ClusterSpec(nodes=nodes, nodes_per_leaf=32, spines=4,
                                                  prefix=f"b{nodes}-"))
    tenants = [Tenant.objects.get_or_create(slug=f"bench-t{i}", defaults={"name": f"T{i}"})[0]
               for i in range(TENANTS)]
    Quota.objects.bulk_create([Quota(tenant=t, gpu_model="H100", max_gpus=nodes * 8,
                                     guaranteed_gpus=nodes) for t in tenants])
    now = clock.now()
    gpus: dict[int, list[Gpu]] = {}
    for gpu in Gpu.objects.order_by("node_id", "index"):
        gpus.setdefault(gpu.node_id, []).append(gpu)
    leases, rows = [], []
    for i, (_node_id, node_gpus) in enumerate(sorted(gpus.items())):
        k = sum(1 for _ in range(8) if rng.random() < 0.4)
        for h in range(history):
            began = now - timedelta(hours=rng.randrange(2, 24 * 60))
            leases.append(Lease(tenant=tenants[(i + h) % TENANTS], gpu_count=rng.choice((1, 8)),
                                start_at=began, end_at=began + timedelta(hours=1),
                                active_at=began, ended_at=began + timedelta(hours=1),
                                state="ended"))
        if not k:
            continue
        end = now + timedelta(seconds=rng.randrange(3600, 86_400))
        lease = Lease(tenant=tenants[i % TENANTS], gpu_count=k, gpu_model="H100",
                      start_at=now - timedelta(hours=1), end_at=end, state="active",
                      active_at=now - timedelta(hours=1))
        leases.append(lease)
        rows += [Allocation(lease=lease, gpu=g, node_id=g.node_id, slot=s,
                            start_at=lease.start_at, end_at=end)
                 for g in node_gpus[:k] for s in range(SLOTS_PER_GPU)]
    Lease.objects.bulk_create(leases, batch_size=5000)
    Allocation.objects.bulk_create(rows, batch_size=5000)
    return tenants


def make_queue(length: int, tenants: list[Any], rng: random.Random) -> list[Any]:
    from portal.core import clock
    from portal.leasing.models import Lease

    now = clock.now()
    Lease.objects.filter(state="queued").delete()
    Lease.objects.bulk_create([
        Lease(tenant=tenants[rng.randrange(TENANTS)], gpu_count=rng.choice((1, 2, 4, 8)),
              start_at=now, end_at=now + timedelta(hours=2), state="queued")
        for _ in range(length)], batch_size=5000)
    return list(Lease.objects.filter(state="queued").select_related("tenant"))


def drop_cache() -> None:
    from portal.leasing import allocation

    forget = getattr(allocation, "forget_cache", None)
    if forget is not None:
        forget()


def run(nodes: list[int], queues: list[int], history: int, repeat: int,
        schedule: bool = True) -> None:
    from portal.core import clock
    from portal.leasing import allocation

    print(f"{'nodes':>6} {'queue':>6} {'cold_ms':>8} {'cold_cpu':>8} {'warm_ms':>8} "
          f"{'warm_cpu':>8} {'quote1_ms':>9} {'quote2_ms':>9} {'requests_ms':>11} "
          f"{'schedule_ms':>11}", flush=True)
    rng = random.Random(7)
    for n in nodes:
        reset()
        tenants = seed(n, history, rng)
        for q in queues:
            queue = make_queue(q, tenants, rng)
            now = clock.now()
            cold, cold_cpu = timed(allocation.snapshot, repeat, drop_cache)
            warm, warm_cpu = timed(allocation.snapshot, repeat)
            drop_cache()
            quote1 = best(lambda: allocation.preview(queue[0], now), 1)
            quote2 = best(lambda: allocation.preview(queue[0], now), 1)
            reqs = best(lambda: [allocation.to_request(le, now) for le in queue], repeat)
            sched = best(lambda: allocation.schedule(queue[:500], now), 1) if schedule else "-"
            print(f"{n:>6} {q:>6} {cold:>8} {cold_cpu:>8} {warm:>8} {warm_cpu:>8} "
                  f"{quote1:>9} {quote2:>9} {reqs:>11} {sched:>11}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--queue", type=int, nargs="+", default=[1, 1000, 5000])
    parser.add_argument("--history", type=int, default=2, help="ended leases per node")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-schedule", action="store_true",
                        help="skip the schedule column (the core's pass: scheduler.bench.passbench)")
    args = parser.parse_args()
    url = os.environ.setdefault("DATABASE_URL", DEFAULT_DB)
    ensure_database(url)
    env = {**os.environ, "GPUPOOL_SIMULATED_AGENTS": "1"}
    manage(env, "migrate", "-v0")
    os.environ["GPUPOOL_SIMULATED_AGENTS"] = "1"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    print(f"portal snapshot on {url.rsplit('/', 1)[-1]}: {args.history} ended leases per "
          f"node of history; schedule = at most 500 queued (the portal's PASS_LIMIT)")
    run(args.nodes, args.queue, args.history, args.repeat, not args.no_schedule)


if __name__ == "__main__":
    sys.exit(main())
