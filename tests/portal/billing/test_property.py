"""Random lease histories → invoice totals are exactly the rounded per-second usage × price.

Each example plays a history forward in time: leases start, get extended, are released
early, expire (sometimes noticed late), are preempted or fail; list prices change at hour
boundaries. Metering runs at random moments with the lease rows as they were then. The
oracle prices every second independently; invoices must match it to the cent, and
rerunning metering must change nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from portal.billing import services
from portal.billing.metering import meter_leases
from portal.billing.models import Price, UsageRecord
from portal.billing.pricing import default_list_price
from portal.leasing.models import Lease, LeaseState
from tests.portal.billing.builders import make_lease
from tests.portal.factories import make_tenant

T0 = datetime(2026, 1, 31, 18, 0, tzinfo=UTC)  # histories cross a month boundary
OUTCOMES = ["released", "expired", "expired_late", "preempted", "failed", "never_active",
            "running"]


@dataclass
class Plan:
    start: int          # seconds after T0
    length: int         # planned seconds
    extend: int         # 0 or extra seconds, granted half-way through
    stop: int           # seconds after start for released/preempted/failed
    outcome: str
    gpus: tuple[int, int, int]  # gpu_count, nodes, gpu_milli
    priority: str


plans = st.builds(
    Plan, start=st.integers(0, 20 * 3600), length=st.integers(1, 30 * 3600),
    extend=st.sampled_from([0, 0, 1800, 7 * 3600 + 13]), stop=st.integers(1, 40 * 3600),
    outcome=st.sampled_from(OUTCOMES),
    gpus=st.tuples(st.integers(1, 8), st.integers(1, 2), st.sampled_from([125, 500, 1000])),
    priority=st.sampled_from(["on_demand", "reserved", "spot"]))
price_changes = st.lists(st.tuples(st.integers(0, 60), st.sampled_from(["on_demand", "spot"]),
                                   st.decimals("0.0100", "9.9999", places=4)), max_size=4,
                         unique_by=lambda p: (p[0], p[1]))


def timeline(p: Plan) -> dict:
    """Durable facts of a plan: active_at, end_at before/after extension, ended_at, state."""
    active = T0 + timedelta(seconds=p.start)
    end0 = active + timedelta(seconds=p.length)
    ext_at = active + timedelta(seconds=p.length // 2) if p.extend else None
    end1 = end0 + timedelta(seconds=p.extend)
    stop = active + timedelta(seconds=p.stop)
    out = {"active": active, "end0": end0, "end1": end1, "ext_at": ext_at, "seen": None}
    if p.outcome in ("released", "preempted", "failed") and stop < end1:
        out["ended"], out["seen"] = stop, stop
        out["state"] = {"released": LeaseState.ENDED, "preempted": LeaseState.PREEMPTED,
                        "failed": LeaseState.FAILED}[p.outcome]
    elif p.outcome == "running":
        out["ended"], out["state"] = None, LeaseState.ACTIVE
    else:
        lag = timedelta(seconds=4000) if p.outcome == "expired_late" else timedelta(0)
        out["ended"], out["seen"], out["state"] = end1 + lag, end1 + lag, LeaseState.EXPIRED
    return out


def apply_at(lease: Lease, p: Plan, tl: dict, t: datetime) -> None:
    """Set the lease row to what the leasing services would have written by time ``t``."""
    never = p.outcome == "never_active"
    lease.end_at = tl["end1"] if tl["ext_at"] and t >= tl["ext_at"] else tl["end0"]
    lease.active_at = None if never or t < tl["active"] else tl["active"]
    done = tl["seen"] is not None and t >= tl["seen"]
    lease.ended_at = tl["ended"] if done and not never else None
    if never:
        lease.state = LeaseState.FAILED if t >= tl["active"] else LeaseState.QUEUED
    else:
        lease.state = tl["state"] if done else LeaseState.ACTIVE
    lease.save()


def price_at(prices: list, priority: str, at: datetime) -> Decimal:
    rows = [(h, v) for h, pr, v in prices if pr == priority and T0 + timedelta(hours=h) <= at]
    return max(rows)[1] if rows else default_list_price(priority)


def oracle(p: Plan, tl: dict, prices: list, horizon: datetime) -> dict[date, list[Fraction]]:
    """Exact amount of every hourly line per month; failed/never-active leases owe nothing."""
    if p.outcome in ("never_active",):
        return {}
    end = min(tl["ended"] or horizon, tl["end1"], horizon)
    gpus = Fraction(p.gpus[0] * p.gpus[1] * p.gpus[2], 1000)
    out: dict[date, list[Fraction]] = {}
    second = tl["active"]
    while second < end:
        hour = second.replace(minute=0, second=0, microsecond=0)
        upto = min(hour + timedelta(hours=1), end)
        secs = int((upto - second).total_seconds())
        price = Fraction(price_at(prices, p.priority, hour))
        amount = gpus * secs * price / 3600
        if tl["state"] == LeaseState.FAILED and tl["ended"] is not None:
            amount = Fraction(0)
        out.setdefault(date(hour.year, hour.month, 1), []).append(amount)
        second = upto
    return out


def cents(x: Fraction) -> Decimal:
    return (Decimal(x.numerator) / Decimal(x.denominator)).quantize(Decimal("0.01"),
                                                                     ROUND_HALF_UP)


@pytest.mark.django_db
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(leases=st.lists(plans, min_size=1, max_size=3), prices=price_changes,
       checkpoints=st.lists(st.integers(0, 80 * 3600), max_size=4))
def test_invoices_equal_priced_per_second_usage(leases: list[Plan], prices: list,
                                                checkpoints: list[int]) -> None:
    sid = transaction.savepoint()
    try:
        _run_example(leases, prices, checkpoints)
    finally:
        transaction.savepoint_rollback(sid)


def _run_example(leases: list[Plan], prices: list, checkpoints: list[int]) -> None:
    tenant = make_tenant("prop")
    for hour, priority, value in prices:
        Price.objects.create(priority=priority, unit_price=value,
                             effective_from=T0 + timedelta(hours=hour))
    rows = []
    for p in leases:
        tl = timeline(p)
        lease = make_lease(tenant, active_at=None, end_at=tl["end0"], state=LeaseState.QUEUED,
                           gpu_count=p.gpus[0], nodes=p.gpus[1], gpu_milli=p.gpus[2],
                           priority=p.priority)
        rows.append((lease, p, tl))
    horizon = T0 + timedelta(hours=90)
    for t in sorted(T0 + timedelta(seconds=s) for s in checkpoints) + [horizon]:
        for lease, p, tl in rows:
            apply_at(lease, p, tl, t)
        meter_leases(until=t)

    snapshot = sorted(UsageRecord.objects.values_list("lease_id", "period_start", "seconds",
                                                      "cost", "closed"))
    again = meter_leases(until=horizon)
    assert (again.created, again.updated, again.deleted, again.credits) == (0, 0, 0, 0)
    assert sorted(UsageRecord.objects.values_list("lease_id", "period_start", "seconds",
                                                  "cost", "closed")) == snapshot

    expected: dict[date, list[Fraction]] = {}
    for _lease, p, tl in rows:
        for month, amounts in oracle(p, tl, prices, horizon).items():
            expected.setdefault(month, []).extend(amounts)
    for month in (date(2026, 1, 1), date(2026, 2, 1), date(2026, 3, 1)):
        invoice = services.invoice_refresh(tenant=tenant, month=month)
        lines = expected.get(month, [])
        assert invoice.total == sum((cents(a) for a in lines), Decimal("0.00")), month
        exact = sum(lines, Fraction(0))
        assert abs(Fraction(invoice.total) - exact) <= Fraction(1, 200) * max(len(lines), 1)
