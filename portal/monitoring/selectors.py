"""Cheap aggregate reads for ``/metrics``: a handful of statements per scrape, whatever the
size of the fleet; no tenant-identifying value leaves them (counts and ages only)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, DurationField, ExpressionWrapper, F, Min, Q, Sum, Value
from django.db.models.functions import Greatest

from portal.fleet import intervals
from portal.fleet.models import NodeHealth
from portal.inventory.models import Gpu, Node, Service
from portal.leasing import states
from portal.leasing.models import Lease
from portal.webhooks.models import Message

# agent report lag bounds (seconds): a gauge histogram of the fleet as it is now
LAG_BOUNDS = (5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
# nodes whose agents are not expected to report (taken out by staff)
NOT_REPORTING = (Node.State.DOWN, Node.State.MAINTENANCE)
LATE_FACTOR = 2  # an agent more than two report intervals behind is late


@dataclass(frozen=True)
class Buckets:
    """Cumulative counts per bound (the last is every row), a sum of seconds, a count."""

    cumulative: list[tuple[float, int]]
    sum: float
    count: int


def pending_orders_by_reason() -> dict[str, int]:
    """Orders waiting to be placed (requested or queued), by the reason the last pass
    recorded (``new``: not seen by a pass yet)."""
    rows = (Lease.objects.filter(state__in=sorted(states.WAITING)).order_by()
            .values("wait_reason").annotate(n=Count("id")))
    return {(r["wait_reason"] or "new"): r["n"] for r in rows}


def oldest_due_order_age(now: datetime) -> float:
    """Seconds the longest-waiting order whose start time has come has waited (0: none)."""
    oldest = (Lease.objects.filter(state__in=sorted(states.WAITING), start_at__lte=now)
              .aggregate(t=Min(Greatest("created", "start_at")))["t"])
    return max((now - oldest).total_seconds(), 0.0) if oldest else 0.0


@dataclass(frozen=True)
class AgentLag:
    lag: Buckets  # reporting nodes by seconds since their last report
    max_s: float
    late: int  # more than LATE_FACTOR report intervals behind
    never: int  # expected to report, never did
    interval_s: int  # the report interval agents are told now


def agent_report_lag(now: datetime) -> AgentLag:
    interval = intervals.current().heartbeat_s
    qs = Node.objects.exclude(state__in=NOT_REPORTING).order_by()
    counts: dict[str, Any] = {
        f"b{i}": Count("id", filter=Q(last_heartbeat__gte=now - timedelta(seconds=b)))
        for i, b in enumerate(LAG_BOUNDS)}
    late_before = now - timedelta(seconds=LATE_FACTOR * interval)
    row = qs.aggregate(**counts, reported=Count("last_heartbeat"), oldest=Min("last_heartbeat"),
                       never=Count("id", filter=Q(
                           last_heartbeat__isnull=True)),
                       late=Count("id", filter=Q(last_heartbeat__lt=late_before)))
    reported = int(row["reported"])
    # the sum of lags: reported × now − Σ timestamps, without reading the rows
    lag_sum = 0.0
    if reported:
        stamps = qs.filter(last_heartbeat__isnull=False).annotate(
            lag=ExpressionWrapper(Value(now) - F("last_heartbeat"),
                                  output_field=DurationField()))
        total = stamps.aggregate(s=Sum("lag"))["s"]
        lag_sum = max(total.total_seconds(), 0.0) if total else 0.0
    cumulative = [(b, int(row[f"b{i}"])) for i, b in enumerate(LAG_BOUNDS)]
    max_s = max((now - row["oldest"]).total_seconds(), 0.0) if row["oldest"] else 0.0
    return AgentLag(Buckets([*cumulative, (float("inf"), reported)], lag_sum, reported),
                    max_s, int(row["late"]), int(row["never"]), interval)


def unreachable_nodes() -> int:
    """Nodes the fleet's health sweep marked unreachable (their GPUs offered to nobody)."""
    return NodeHealth.objects.filter(reachable=False).count()


def by_service() -> tuple[dict[str, int], dict[str, int]]:
    """Nodes and GPUs per service state (every state present, zeros included)."""
    out: list[dict[str, int]] = []
    for model in (Node, Gpu):
        counts = dict.fromkeys(Service.values, 0)
        for row in model.objects.order_by().values("service").annotate(n=Count("id")):
            counts[row["service"]] = row["n"]
        out.append(counts)
    return out[0], out[1]


@dataclass(frozen=True)
class WebhookBacklog:
    pending: int  # not yet delivered nor given up
    due: int  # of which due now (next try in the past)
    oldest_due_s: float  # how late the most overdue one is


def webhook_backlog(now: datetime) -> WebhookBacklog:
    qs = Message.objects.filter(status=Message.Status.PENDING).order_by()
    row = qs.aggregate(pending=Count("id"), due=Count("id", filter=Q(next_attempt_at__lte=now)),
                       oldest=Min("next_attempt_at", filter=Q(next_attempt_at__lte=now)))
    oldest = max((now - row["oldest"]).total_seconds(), 0.0) if row["oldest"] else 0.0
    return WebhookBacklog(int(row["pending"]), int(row["due"]), oldest)
