"""EASY backfill for gangs that need one leaf: a reservation for the head-of-line gang.

A gang that requires one leaf (or rail group) and fits no leaf now used to wait while
smaller jobs kept passing it and re-filling the leaf it needed (issue 11: gang wait p95).
The *head-of-line* gang — the first such gang in queue order that is not placed — gets a
:class:`Hold`: the ``need`` nodes of the leaf that frees soonest by the running leases'
ends (:func:`plan_hold`), from the gang's reserved start (the ``need``-th earliest free
time there). Until then those nodes admit only work that *ends* by that start (EASY
backfill: it cannot delay the gang); open-ended work never. Everything else in the
cluster is untouched, so orders are refused only where they would delay the gang; the
refusal reads ``reserved`` ("held for gang G from t").

Pure functions and a frozen value; the working state (``ClusterState.hold``) applies it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Hold:
    """Nodes held for the head-of-line gang ``owner`` from ``start`` (epoch seconds)."""

    owner: str  # request (job) id of the gang
    leaf: str
    nodes: frozenset[str]
    start: int

    @property
    def need(self) -> int:
        return len(self.nodes)

    def admits(self, request_id: str, end: int | None, nodes: int = 1) -> bool:
        """Whether a request may use the held nodes: the gang itself or one as large
        (it takes the leaf the gang waits for), or work that ends by the gang's start
        (``end`` None: open-ended, never)."""
        return (request_id == self.owner or nodes >= self.need
                or (end is not None and end <= self.start))

    @property
    def detail(self) -> str:
        return f"held for gang {self.owner} from t={self.start}"


def plan_hold(owner: str, need: int, leaf_of: Mapping[str, str],
              free_at: Mapping[str, float], now: int) -> Hold | None:
    """The hold for a gang of ``need`` nodes: in the leaf where ``need`` nodes are free
    soonest (per node: ``max(now, free_at)``, absent = free now), those ``need`` nodes
    (earliest first, ties by name) from that time. Ties between leaves go to the lowest
    leaf name. None when no leaf has ``need`` nodes that ever free (open-ended leases:
    ``inf``) or ``need`` < 1."""
    if need < 1:
        return None
    by_leaf: dict[str, list[tuple[float, str]]] = {}
    for node, leaf in leaf_of.items():
        by_leaf.setdefault(leaf, []).append((max(float(now), free_at.get(node, 0.0)), node))
    best: tuple[float, str, list[tuple[float, str]]] | None = None
    for leaf, times in by_leaf.items():
        if len(times) < need:
            continue
        times.sort()
        start = times[need - 1][0]
        if math.isinf(start):
            continue
        if best is None or (start, leaf) < (best[0], best[1]):
            best = (start, leaf, times[:need])
    if best is None:
        return None
    start, leaf, chosen = best
    return Hold(owner, leaf, frozenset(name for _, name in chosen), math.ceil(start))
