"""Histograms kept in PostgreSQL, so that every process on every host feeds the same one and
every web process serves the same numbers (ADR 0230). Observing is one upsert of one row;
reading is one small query, whatever the number of observations. Fed by the scheduling
pass (its duration) and by provisioning (a lease's wait from order to active).
"""

from __future__ import annotations

import logging
import math
from bisect import bisect_left
from dataclasses import dataclass

from django.db import DatabaseError, connection, transaction

from portal.core.models import MetricBucket

log = logging.getLogger(__name__)

INF = "+Inf"
# name -> upper bounds (seconds), as Prometheus' ``le`` labels
BOUNDS: dict[str, tuple[float, ...]] = {
    "gpupool_schedule_pass_duration_seconds": (
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
    "gpupool_order_to_active_seconds": (
        1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0),
}


@dataclass(frozen=True)
class Histogram:
    """Cumulative buckets ``[(le, count), …, ("+Inf", count)]``, the sum and the count."""

    buckets: list[tuple[str, int]]
    sum: float
    count: int


def le_label(bound: float) -> str:
    """The bound as Prometheus' client writes it (``0.5``, ``1.0``, ``+Inf``)."""
    return INF if math.isinf(bound) else repr(float(bound))


def bucket_for(name: str, value: float) -> str:
    """The ``le`` of the smallest bucket ``value`` fits in (value ≤ le)."""
    bounds = BOUNDS[name]
    i = bisect_left(bounds, value)
    return INF if i == len(bounds) else le_label(bounds[i])


def observe(name: str, value: float) -> None:
    """Add one observation: one upsert, in a savepoint, so that a failure (the database
    gone, a caller's broken transaction) is logged and never breaks what was measured."""
    table = connection.ops.quote_name(MetricBucket._meta.db_table)  # a constant, not input
    sql = (f"INSERT INTO {table} (name, le, count, total) VALUES (%s, %s, 1, %s) "  # noqa: S608
           f"ON CONFLICT (name, le) DO UPDATE SET count = {table}.count + 1, "
           f"total = {table}.total + excluded.total")
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, [name, bucket_for(name, value), float(value)])
    except DatabaseError as exc:
        log.warning("histogram %s: observation of %.3f not recorded (%s)", name, value, exc)


def read(name: str) -> Histogram:
    """The histogram as it stands: every bound of ``BOUNDS`` (zeros where nothing fell)."""
    rows = {le: (count, total) for le, count, total in
            MetricBucket.objects.filter(name=name).values_list("le", "count", "total")}
    labels = [le_label(b) for b in BOUNDS[name]] + [INF]
    buckets: list[tuple[str, int]] = []
    running = 0
    for le in labels:
        running += rows.get(le, (0, 0.0))[0]
        buckets.append((le, running))
    return Histogram(buckets=buckets, sum=sum(t for _, t in rows.values()), count=running)
