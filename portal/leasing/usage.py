"""Fair-share usage for the scheduler: decayed running totals, not the lease history.

The core charges each tenant the GPU-seconds of its leases, halved every half-life since
each ended (``scheduler.fairshare.decayed_usage``). Re-reading every lease ever run each
pass grows with history; instead, on PostgreSQL, a trigger (migration
``0005_passscale_schedcache``) folds a lease into ``leasing_tenantusage`` when it ends:
per tenant one decayed sum ``S`` valid at ``at_s``. Because decay is a factor, ``S``
handed to the core as one record ending at ``at_s`` decays exactly as its parts would.
Leases still running (``active_at`` set, ``ended_at`` not) are charged up to ``now`` as
before, read through a partial index. :func:`from_history` is the old computation: the
fallback elsewhere (the demo's SQLite) and the reference the tests compare with.
"""

from __future__ import annotations

from datetime import datetime

from django.db import connection

from portal.leasing.models import Lease

HALF_LIFE_S = 7 * 24 * 3600  # scheduler.model.DEFAULT_HALF_LIFE_S (a test checks they match)
Record = tuple[str, float, int]  # (tenant slug, GPU-seconds, ended at): core.UsageRecord

RECORDS = """
SELECT t.slug, u.gpu_seconds, u.at_s::float8, u.half_life_s, false
FROM leasing_tenantusage u JOIN tenants_tenant t ON t.id = u.tenant_id
UNION ALL
SELECT t.slug, (l.gpu_count * l.nodes * l.gpu_milli / 1000.0)::float8,
       extract(epoch FROM l.active_at)::float8, 0, true
FROM leasing_lease l JOIN tenants_tenant t ON t.id = l.tenant_id
WHERE l.active_at IS NOT NULL AND l.ended_at IS NULL
"""

REBUILD = """
DELETE FROM leasing_tenantusage;
SELECT leasing_usage_add(l.tenant_id, leasing_usage_of(l),
                         floor(extract(epoch FROM l.ended_at))::bigint)
FROM leasing_lease l WHERE l.active_at IS NOT NULL AND l.ended_at IS NOT NULL
ORDER BY l.ended_at;
"""


def kept() -> bool:
    """Whether the running totals exist here (PostgreSQL with the migration applied)."""
    return connection.vendor == "postgresql"


def records(now: datetime, *, retry: bool = True) -> tuple[Record, ...]:
    """What the core needs for fair share at ``now``, in one query: one record per
    tenant for its ended leases, one per running lease."""
    if not kept():
        return from_history(now)
    with connection.cursor() as cur:
        cur.execute(RECORDS)
        rows = cur.fetchall()
    if any(not running and half_life != HALF_LIFE_S for _, _, _, half_life, running in rows):
        if not retry:
            return from_history(now)
        rebuild()  # folded with another half-life: doubt, fold the history again
        return records(now, retry=False)
    now_s = now.timestamp()
    out: list[Record] = []
    for slug, amount, at, _, running in rows:
        if not running:
            out.append((slug, amount, int(at)))
            continue
        seconds = max(now_s - at, 0.0)
        if seconds:
            out.append((slug, seconds * amount, int(now_s)))
    return tuple(out)


def rebuild() -> None:
    """Fold the whole history again (the totals are derived data: safe at any time)."""
    with connection.cursor() as cur:
        cur.execute("ALTER TABLE leasing_tenantusage ALTER COLUMN half_life_s "
                    f"SET DEFAULT {int(HALF_LIFE_S)}")
        cur.execute(REBUILD)


def from_history(now: datetime) -> tuple[Record, ...]:
    """Every lease that ever ran, read again (the computation before the totals)."""
    records: list[Record] = []
    for lease in Lease.objects.filter(active_at__isnull=False).select_related("tenant").only(
            "tenant__slug", "active_at", "ended_at", "gpu_count", "nodes", "gpu_milli"):
        end = min(lease.ended_at or now, now)
        seconds = max((end - lease.active_at).total_seconds(), 0) if lease.active_at else 0
        if seconds:
            records.append((lease.tenant.slug, seconds * lease.total_gpus,
                            int(end.timestamp())))
    return tuple(records)
