"""Which nodes the reconciler re-derives each beat (``reconcile.repush_drifted_nodes``):
the nodes whose push failed, first, and a rotating slice of the granting nodes sized so
that all of them are checked once per ``GPUPOOL_REPUSH_SWEEP_S`` (default 600 s; at
least ``GPUPOOL_REPUSH_MIN_PER_BEAT``, default 20, per beat).

Both live in the cache (Redis in production): a failure record or the cursor lost with
it only delays a repair until the sweep comes round, it never skips one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from django.conf import settings
from django.core.cache import cache

from portal.fleet.models import NodeDesiredState
from portal.leasing import desired
from portal.leasing.models import Allocation

CURSOR_KEY = "gpupool:repush:cursor"
FAILED_KEY = "gpupool:repush:failed"
DEFAULT_SWEEP_S = 600
DEFAULT_MIN_PER_BEAT = 20
HOLD_S = 24 * 3600


def granting_nodes() -> list[int]:
    """Nodes with a granting lease, or with grants in their stored document (to revoke)."""
    live = set(Allocation.objects.filter(live=True, lease__state__in=desired.GRANTING)
               .values_list("node_id", flat=True).distinct())
    return sorted(live | set(nodes_with_stored_grants()))


def nodes_with_stored_grants() -> list[int]:
    """Nodes whose stored document grants something: decided in the database, so a beat
    reads node ids, not every node's grants (SSH keys included) — at 10,000 nodes that
    was every document's grant list every 5 s."""
    return list(NodeDesiredState.objects.filter(document__has_key="access_grants")
                .exclude(document__access_grants=[]).exclude(document__access_grants=None)
                .values_list("node_id", flat=True))


def _budget(count: int) -> int:
    sweep = float(getattr(settings, "GPUPOOL_REPUSH_SWEEP_S", DEFAULT_SWEEP_S))
    beat = float(getattr(settings, "RECONCILE_EVERY_S", 5))
    least = int(getattr(settings, "GPUPOOL_REPUSH_MIN_PER_BEAT", DEFAULT_MIN_PER_BEAT))
    return max(least, math.ceil(count * beat / max(sweep, beat)))


def next_slice(candidates: Sequence[int], budget: int | None = None) -> list[int]:
    """The next ``budget`` candidates after the stored cursor, wrapping around."""
    if not candidates:
        return []
    size = min(len(candidates), budget or _budget(len(candidates)))
    after = cache.get(CURSOR_KEY)
    start = next((i for i, pk in enumerate(candidates)
                  if after is not None and pk > after), 0)
    chosen = [candidates[(start + i) % len(candidates)] for i in range(size)]
    cache.set(CURSOR_KEY, chosen[-1], timeout=HOLD_S)
    return chosen


class _Failed:
    """Node pks whose push failed, to retry at the next beat."""

    def add(self, node_ids: Iterable[Any]) -> None:
        ids = {int(pk) for pk in node_ids}
        if ids:
            cache.set(FAILED_KEY, sorted(set(cache.get(FAILED_KEY) or []) | ids),
                      timeout=HOLD_S)

    def take(self) -> list[int]:
        ids = list(cache.get(FAILED_KEY) or [])
        if ids:
            cache.delete(FAILED_KEY)
        return ids


FAILED = _Failed()
