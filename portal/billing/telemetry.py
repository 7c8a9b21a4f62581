"""Average GPU utilisation of a lease per charge period, from the agents' telemetry.

The fleet app keeps a downsampled history, ``portal.fleet.models.TelemetrySample``: at most
one row per GPU per minute (``kind="gpu"``, ``key`` = the GPU's NVML index on its node,
``values["gpu_util_pct"]``). Samples carry no lease, so they are joined through
``portal.leasing.models.Allocation`` (lease ↔ GPU during ``[start_at, end_at)``): a sample
belongs to a lease's charge period when its GPU was allocated to the lease at that minute and
the minute lies in the period's billed interval ``[used_from, used_to)`` (which also cuts
allocations whose ``end_at`` was not moved at release).

The average of a period is the plain mean over those samples (every GPU-minute weighs the
same; a GPU held through several slots counts once), in percent, rounded half-up to 2
decimals; ``None`` without samples. Metering stores it on the usage record
(``UsageRecord.gpu_util_avg``), so exports and showback read it without touching telemetry.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from django.db.models import Q

from portal.fleet.models import TelemetrySample
from portal.leasing.models import Allocation

PERCENT = Decimal("0.01")
UTIL_KEY = "gpu_util_pct"

# (period_start, used_from, used_to) of one usage record
Span = tuple[datetime, datetime, datetime]


def _number(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


def period_utilisation(lease_id: Any, spans: Iterable[Span]) -> dict[datetime, Decimal]:
    """``{period_start: average GPU utilisation %}`` for the periods that have samples.

    Two queries whatever the number of periods: the lease's allocations, then the samples of
    its GPUs over the whole range of ``spans``.
    """
    spans = [s for s in spans if s[2] > s[1]]
    if not spans:
        return {}
    gpus: dict[tuple[Any, str], list[tuple[datetime, datetime]]] = defaultdict(list)
    for node_id, index, start_at, end_at in Allocation.objects.filter(
            lease_id=lease_id).values_list("node_id", "gpu__index", "start_at", "end_at"):
        gpus[(node_id, str(index))].append((start_at, end_at))
    if not gpus:
        return {}
    lo, hi = min(s[1] for s in spans), max(s[2] for s in spans)
    which = Q()
    for node_id, key in gpus:
        which |= Q(node_id=node_id, key=key)
    samples = (TelemetrySample.objects
               .filter(which, kind=TelemetrySample.Kind.GPU, minute__gte=lo, minute__lt=hi)
               .values_list("node_id", "key", "minute", "values"))
    windows = {s[0]: (s[1], s[2]) for s in spans}  # charge periods are whole UTC hours
    totals: dict[datetime, list[Decimal | int]] = {}
    seen: set[tuple[Any, str, datetime]] = set()
    for node_id, key, minute, values in samples.iterator(chunk_size=2000):
        util = _number((values or {}).get(UTIL_KEY))
        if util is None or (node_id, key, minute) in seen:
            continue
        if not any(a <= minute < b for a, b in gpus[(node_id, key)]):
            continue
        period = minute.replace(minute=0, second=0, microsecond=0)
        window = windows.get(period)
        if window is None or not window[0] <= minute < window[1]:
            continue
        seen.add((node_id, key, minute))
        total = totals.setdefault(period, [Decimal(0), 0])
        total[0] += util
        total[1] += 1
    return {period: (Decimal(total) / count).quantize(PERCENT, rounding=ROUND_HALF_UP)
            for period, (total, count) in totals.items()}
