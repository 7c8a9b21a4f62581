"""Queue order: priority class, then weighted fair share with decayed usage, then age.

Within a priority class, the tenant with the lowest ``decayed_usage / weight`` goes next;
each request taken charges its tenant (GPUs x duration, one hour when open-ended), so
tenants interleave within a pass. A tenant's own requests go oldest first.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence

from scheduler.model import FairShareConfig, Request, TenantQuota, UsageRecord

OPEN_ENDED_CHARGE_S = 3600


def decay_factor(age_s: float, half_life_s: int) -> float:
    if half_life_s <= 0:
        raise ValueError("half_life_s must be > 0")
    return float(0.5 ** (max(0.0, age_s) / half_life_s))


def decayed_usage(
    records: Iterable[UsageRecord], now: int, config: FairShareConfig,
) -> dict[str, float]:
    """GPU-seconds per tenant, each record halved every ``half_life_s`` since it ended."""
    out: dict[str, float] = {}
    for r in records:
        out[r.tenant] = out.get(r.tenant, 0.0) + r.gpu_seconds * decay_factor(
            now - r.at, config.half_life_s)
    return out


def charge(request: Request) -> float:
    duration = request.duration if request.duration is not None else OPEN_ENDED_CHARGE_S
    return request.gpu_count * duration


def order_queue(
    queue: Sequence[Request], usage: Mapping[str, float],
    quotas: Mapping[str, TenantQuota],
) -> list[Request]:
    """The order in which a pass considers requests (deterministic)."""
    out: list[Request] = []
    for prio in sorted({r.priority for r in queue}):
        out.extend(_fair_order([r for r in queue if r.priority == prio], usage, quotas))
    return out


def _fair_order(
    requests: Sequence[Request], usage: Mapping[str, float],
    quotas: Mapping[str, TenantQuota],
) -> list[Request]:
    per_tenant: dict[str, list[Request]] = {}
    for r in sorted(requests, key=lambda r: (r.submitted_at, r.id), reverse=True):
        per_tenant.setdefault(r.tenant, []).append(r)  # oldest at the end: pop()
    share = {t: usage.get(t, 0.0) for t in per_tenant}
    heap = [(share[t] / _weight(quotas, t), t) for t in per_tenant]
    heapq.heapify(heap)
    out: list[Request] = []
    while heap:
        _, tenant = heapq.heappop(heap)
        req = per_tenant[tenant].pop()
        out.append(req)
        share[tenant] += charge(req)
        if per_tenant[tenant]:
            heapq.heappush(heap, (share[tenant] / _weight(quotas, tenant), tenant))
    return out


def _weight(quotas: Mapping[str, TenantQuota], tenant: str) -> float:
    q = quotas.get(tenant)
    return q.weight if q is not None and q.weight > 0 else 1.0
