"""A gang reserve with time-bounded backfill: whole leaves kept for leaf gangs (ADR 0155).

Issue 11's tail is the largest leaf-required gangs (a whole leaf on the 2-tier fabric)
arriving in bursts; a leaf becomes whole only when its *longest* job ends, so a soft drain
started when the gang arrives makes it wait for the residual time of that job (ADR 0145).
The lease product knows every lease's end at placement, so the reserve is conservative
backfilling (Slurm/Maui) at the leaf level, with hard blocks instead of soft costs:

- every waiting leaf-required gang (queue order, at most ``max_waiting``) gets a
  :class:`Reserved` leaf *owned* by it: the ``need`` nodes of the untaken leaf where they
  are free soonest by the calendar, from that time (``start``). Until then the nodes take
  only work that *ends* by ``start`` (it cannot delay the gang); open-ended work never;
- besides those, ``keep`` leaves are kept ahead for the largest leaf gang seen
  (``keep_for``): whole leaves first (``start`` = now + ``bound``: only work shorter than
  the bound may land there, so an arriving gang waits at most ``bound``), else the leaves
  that free soonest (``start`` = max(their free time, now + bound): nothing that ends
  later lands there; with ``drain_kept`` off, only whole leaves are kept). A gang of at
  least ``need`` nodes may take a kept leaf. Kept leaves
  are counted against the owned ones for a gang as large (a burst uses the kept leaves
  first and does not drain more than ``keep`` leaves on top of its own).

Pure functions and frozen values; the working state (``ClusterState.set_reserve``)
applies them through ``blocked_for``, as it applies the EASY :class:`~scheduler.reservation.Hold`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ReserveSettings:
    """How much the reserve keeps (a policy's setting; measured in ADR 0155)."""

    keep: int = 1  # leaves kept ahead for the largest leaf gang seen
    bound: int = 0  # s: work shorter than this may use a kept whole leaf
    max_waiting: int = 1  # waiting leaf gangs that get an owned reservation (1: EASY)
    largest_first: bool = False  # owned reservations for the largest waiting gangs first
    drain_kept: bool = True  # no whole leaf to keep: drain the one freeing soonest (else none)


@dataclass(frozen=True)
class Reserved:
    """``nodes`` of ``leaf`` reserved from ``start`` for a gang of ``need`` nodes:
    ``owner`` (a waiting gang's request id) or, None, any gang that large (kept ahead)."""

    leaf: str
    nodes: frozenset[str]
    start: int
    need: int
    owner: str | None = None

    def admits(self, request_id: str, end: int | None, nodes: int = 1) -> bool:
        """Whether a request may use the nodes: the owner; for a kept leaf, a gang of at
        least ``need`` nodes; else only work ending by ``start`` (open-ended: never)."""
        if self.owner is not None and request_id == self.owner:
            return True
        if self.owner is None and nodes >= self.need:
            return True
        return end is not None and end <= self.start


@dataclass(frozen=True)
class GangReserve:
    """Every reserved leaf of one moment."""

    leaves: tuple[Reserved, ...] = ()

    def blocked(self, request_id: str, end: int | None, nodes: int = 1) -> frozenset[str]:
        """Node names the request may not use."""
        out: set[str] = set()
        for r in self.leaves:
            if not r.admits(request_id, end, nodes):
                out |= r.nodes
        return frozenset(out)

    def owned_by(self, request_id: str) -> Reserved | None:
        return next((r for r in self.leaves if r.owner == request_id), None)

    def detail(self, request_id: str, end: int | None, nodes: int = 1) -> str:
        for r in self.leaves:
            if not r.admits(request_id, end, nodes):
                whom = f"gang {r.owner}" if r.owner else f"a {r.need}-node gang"
                return f"leaf {r.leaf} reserved for {whom} from t={r.start}"
        return ""


def _free_times(leaf_of: Mapping[str, str], free_at: Mapping[str, float],
                now: int) -> dict[str, list[tuple[float, str]]]:
    by_leaf: dict[str, list[tuple[float, str]]] = {}
    for node, leaf in leaf_of.items():
        by_leaf.setdefault(leaf, []).append((max(float(now), free_at.get(node, 0.0)), node))
    for times in by_leaf.values():
        times.sort()
    return by_leaf


def plan_reserve(waiting: Sequence[tuple[str, int]], keep_for: int | None,
                 leaf_of: Mapping[str, str], free_at: Mapping[str, float], now: int,
                 settings: ReserveSettings = ReserveSettings()) -> GangReserve:
    """The reserve at ``now``: ``waiting`` are the queued leaf-required gangs as
    (request id, nodes) in queue order; ``keep_for`` the nodes of the largest leaf gang
    seen (None: no kept leaves); ``free_at`` when each node is free of every lease
    (absent: free now; ``inf``: open-ended). Ties between leaves go to the lowest name."""
    by_leaf = _free_times(leaf_of, free_at, now)
    taken: set[str] = set()
    out: list[Reserved] = []

    def soonest(need: int) -> tuple[float, str] | None:
        ready = [(times[need - 1][0], leaf) for leaf, times in by_leaf.items()
                 if leaf not in taken and len(times) >= need]
        ready = [r for r in ready if not math.isinf(r[0])]
        return min(ready) if ready else None

    def take(leaf: str, need: int, start: float, owner: str | None) -> None:
        taken.add(leaf)
        nodes = frozenset(name for _, name in by_leaf[leaf][:need])
        out.append(Reserved(leaf, nodes, math.ceil(start), need, owner))

    kept_left = settings.keep if keep_for is not None and keep_for > 1 else 0
    order = sorted(waiting, key=lambda g: -g[1]) if settings.largest_first else list(waiting)
    for owner, need in order[:settings.max_waiting]:
        if need < 2:
            continue
        best = soonest(need)
        if best is None:
            continue
        take(best[1], need, best[0], owner)
        if keep_for is not None and need >= keep_for and kept_left:
            kept_left -= 1  # a gang as large as the kept-for one uses a kept leaf
    if kept_left and keep_for is not None:
        for _ in range(kept_left):
            best = soonest(keep_for)
            if best is None or (not settings.drain_kept and best[0] > now):
                break
            take(best[1], keep_for, max(best[0], float(now + settings.bound)), None)
    return GangReserve(tuple(out))
