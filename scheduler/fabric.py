"""Fabric context for placement: which leaf each node sits in, and how whole the leaves are.

FGD-family scorers see the GPUs inside one node; they cannot tell a fresh node in a
wholly free leaf from a fresh node in a busy one, so small orders used to break the free
leaves that gangs need. The *leaf flags* below are folded into each node's state key
(``NodeKey[6]``), so the ``fabric`` scorer stays a pure function of the key and every
evaluation is still memoised per key.

Flags of a node's leaf (a bit set):

- ``IN_FABRIC``: the node belongs to a known leaf (nodes outside any topology score 0, so
  a flat cluster — the openb replay — is placed exactly as before);
- ``WHOLE``: every GPU node of the leaf is idle (a whole free leaf);
- ``EDGE``: the leaf has exactly the typical gang's node count idle — breaking one more
  node leaves it unable to host that gang;
- ``LAST``: the leaf is one of the last ``reserve`` leaves able to host the typical gang;
- ``DRAIN``: a queued gang that needs one leaf has no leaf with enough idle nodes; the
  leaf where enough nodes are free soonest by the calendar (:func:`drain_leaf`) is
  drained for it: any new work placed on it costs more than anywhere else, so it empties
  as its leases end (the choice is stable from pass to pass: what runs there only ends);
- bits 5 and up: the leaf's idle nodes as sixteenths of its size (``IDLE_SHIFT``), so
  that among leaves otherwise alike, an idle node is broken in the leaf with the fewest
  idle nodes (best fit at the leaf level: free nodes gather in the emptiest leaves).
"""

from __future__ import annotations

import copy
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

IN_FABRIC = 1
WHOLE = 2
EDGE = 4
LAST = 8
DRAIN = 16
KEEP = 32
IDLE_SHIFT = 6
IDLE_STEPS = 16
KEEP_LEAVES = 2  # leaves kept able to host the largest leaf gang seen (or drained)


@dataclass(frozen=True)
class FabricModel:
    """Read-only fabric facts of one snapshot."""

    leaf_of: Mapping[str, str]  # node name -> leaf (or rail group) it is local under
    gang_nodes: int | None = None  # typical gang size in nodes (None: no gangs seen)
    reserve: int = 1  # how many gang-capable leaves count as "the last ones"
    drain_for: int | None = None  # nodes of the largest queued gang that needs one leaf
    drain_leaf: str | None = None  # the leaf to drain for it (see drain_leaf)
    # Nodes of the largest leaf-required gang seen (queue and leases): one leaf able to
    # host it is kept (KEEP), or drained when none is, before such a gang waits.
    keep_for: int | None = None
    keep_leaves: int = KEEP_LEAVES  # how many leaves able to host it are kept (or drained)
    # Every drained leaf, as (need, leaf) pairs (drain_leaves); None: one automatic
    # drained leaf for ``drain_for`` (``drain_leaf``), the behaviour before.
    drains: tuple[tuple[int, str], ...] | None = None


def drain_leaf(leaf_of: Mapping[str, str], free_at: Mapping[str, float],
               need: int | None) -> str | None:
    """The leaf where ``need`` nodes are free soonest: per leaf, the ``need``-th earliest
    time its nodes are free of every lease (``free_at``; absent = free now); ties to the
    lowest leaf name. None when no gang waits or no leaf has ``need`` nodes."""
    if need is None:
        return None
    times: dict[str, list[float]] = {}
    for node, leaf in leaf_of.items():
        times.setdefault(leaf, []).append(free_at.get(node, 0.0))
    ready = [(sorted(ts)[need - 1], leaf) for leaf, ts in times.items() if len(ts) >= need]
    return min(ready)[1] if ready else None


def drain_leaves(leaf_of: Mapping[str, str], free_at: Mapping[str, float],
                 needs: Sequence[int], idle: Mapping[str, int] | None = None,
                 ) -> list[tuple[int, str]]:
    """A leaf for each waiting gang (``needs``: node counts): largest first, a gang that
    fits a leaf now (``idle`` per leaf) takes it, else the free leaf where its count is
    free soonest by the calendar (as :func:`drain_leaf`); one gang per leaf. Returns the
    (need, leaf) pairs to drain, in the order of ``needs`` sorted largest first."""
    times: dict[str, list[float]] = {}
    for node, leaf in leaf_of.items():
        times.setdefault(leaf, []).append(free_at.get(node, 0.0))
    for ts in times.values():
        ts.sort()
    idle_now = dict(idle or {})
    taken: set[str] = set()
    out: list[tuple[int, str]] = []
    for need in sorted(needs, reverse=True):
        now = [leaf for leaf, n in idle_now.items() if n >= need and leaf not in taken]
        if now:
            taken.add(min(now, key=lambda leaf: (idle_now[leaf], leaf)))
            continue
        ready = [(ts[need - 1], leaf) for leaf, ts in times.items()
                 if len(ts) >= need and leaf not in taken]
        if ready:
            leaf = min(ready)[1]
            taken.add(leaf)
            out.append((need, leaf))
    return out


def typical_gang(sizes: Iterable[int]) -> int | None:
    """Median node count of the multi-node gangs seen (queue and leases), if any."""
    gangs = sorted(s for s in sizes if s > 1)
    if not gangs:
        return None
    return int(statistics.median_low(gangs))


@dataclass(frozen=True)
class _Marks:
    """The cluster-wide part of the leaf flags: which leaves are drained or kept, and
    whether the gang-capable leaves are the last ones (``LAST``). A flag that depends on
    other leaves than its own belongs here, or ``LeafTracker.update`` misses its leaves."""

    draining: frozenset[int] = field(default_factory=frozenset)
    kept: frozenset[int] = field(default_factory=frozenset)
    last: bool = False


class LeafTracker:
    """Mutable per-leaf idle counts for one working state; yields each node's flags.

    A node's change re-derives only its own leaf's flags, plus the few leaves whose
    cluster-wide marks (``_Marks``) change with it: O(affected leaves), not O(leaves).
    """

    def __init__(self, model: FabricModel, names: Sequence[str]) -> None:
        self.gang = model.gang_nodes
        self.reserve = max(1, model.reserve)
        self.drain_for = model.drain_for
        self.keep_for = model.keep_for
        leaf_ids: dict[str, int] = {}
        self.leaf: list[int] = []
        for name in names:
            leaf = model.leaf_of.get(name)
            self.leaf.append(-1 if leaf is None else leaf_ids.setdefault(leaf, len(leaf_ids)))
        self.leaf_ids = leaf_ids
        self.target = leaf_ids.get(model.drain_leaf or "")  # the leaf to drain
        self.members: list[list[int]] = [[] for _ in leaf_ids]
        for i, lid in enumerate(self.leaf):
            if lid >= 0:
                self.members[lid].append(i)
        self.node_idle = [False] * len(names)
        self.counted = [False] * len(names)  # GPU node, ready: part of the leaf's size
        self.idle = [0] * len(leaf_ids)
        self.size = [0] * len(leaf_ids)
        self.flags = [0] * len(leaf_ids)
        self.keep_leaves = model.keep_leaves
        self.extra: dict[int, int] = {}  # drained leaves: leaf -> need (set_drains)
        self.planned = False  # set_drains named every drained leaf (no automatic one)
        if model.drains is not None:
            self.planned = True
            self.extra = {leaf_ids[leaf]: need for need, leaf in model.drains
                          if leaf in leaf_ids}
        self.able_for_gang: set[int] = set()  # leaves with ``gang`` idle nodes or more
        self.able_for_need: set[int] = set()  # leaves with ``need`` idle nodes or more
        self.marks = _Marks()
        self.stale = True  # set_node ran since the last full recompute

    def copy(self) -> LeafTracker:
        """An independent copy: the leaf layout (``leaf``, ``leaf_ids``, ``members``)
        never changes after the build and is shared; every count and flag is copied."""
        new = copy.copy(self)
        new.node_idle, new.counted = list(self.node_idle), list(self.counted)
        new.idle, new.size, new.flags = list(self.idle), list(self.size), list(self.flags)
        new.extra = dict(self.extra)
        new.able_for_gang, new.able_for_need = set(self.able_for_gang), set(self.able_for_need)
        return new

    def set_node(self, i: int, counted: bool, idle: bool) -> None:
        """Record node ``i``'s state without recomputing flags (initial load: call
        :meth:`recompute` once after the last one)."""
        if self._record(i, counted, idle) >= 0:
            self.stale = True

    def _record(self, i: int, counted: bool, idle: bool) -> int:
        """Count node ``i``'s new state in its leaf; return the leaf (-1: none)."""
        lid = self.leaf[i]
        if lid < 0:
            return lid
        self.size[lid] += int(counted) - int(self.counted[i])
        self.idle[lid] += int(counted and idle) - int(self.counted[i] and self.node_idle[i])
        self.counted[i], self.node_idle[i] = counted, idle
        self._classify(lid)
        return lid

    def _classify(self, lid: int) -> None:
        """Keep ``able_for_gang`` and ``able_for_need`` in step with leaf ``lid``."""
        for able, nodes in ((self.able_for_gang, self.gang), (self.able_for_need, self.need)):
            if nodes is not None and self.idle[lid] >= nodes:
                able.add(lid)
            else:
                able.discard(lid)

    def history_free(self) -> bool:
        """Whether the flags depend only on the nodes' current states, not on the order
        they changed in: only the automatic drained leaf, once chosen, stays chosen."""
        need = self.need
        return self.planned or need is None or need < 2

    def flag(self, i: int) -> int:
        lid = self.leaf[i]
        return 0 if lid < 0 else self.flags[lid]

    def capable(self, lid: int) -> bool:
        return self.gang is not None and self.idle[lid] >= self.gang

    @property
    def need(self) -> int | None:
        """Nodes of the gang leaves are kept for: the waiting one, else the largest seen."""
        return self.drain_for if self.drain_for is not None else self.keep_for

    def kept(self) -> list[int]:
        """Leaves at the edge of hosting the kept-for gang (``need`` idle nodes exactly)
        while at most ``keep_leaves`` leaves can host it: breaking one costs more
        (``KEEP``)."""
        need = self.need
        if need is None or need < 2:
            return []
        if len(self.able_for_need) > self.keep_leaves:
            return []
        return sorted(lid for lid in self.able_for_need if self.idle[lid] == need)

    def avoid(self, gang: int) -> list[int]:
        """Leaves a gang of ``gang`` nodes keeps off if it can: the drained leaf and the
        kept ones, when they are for a larger gang."""
        need = self.need
        if need is None or gang >= need:
            return []
        drained = self.drained()
        out = [drained] if drained is not None else self.kept()
        return out + [lid for lid, n in self.extra.items() if n > gang and lid not in out]

    def set_drains(self, drains: Sequence[tuple[int, str]]) -> list[int]:
        """Drain exactly these (need, leaf) pairs (a leaf stays drained while it has
        fewer than ``need`` idle nodes), instead of the one automatic drained leaf;
        return the leaves whose flags changed."""
        self.planned = True
        self.extra = {lid: need for need, leaf in drains
                      if (lid := self.leaf_ids.get(leaf)) is not None}
        return self.recompute()

    def drained(self) -> int | None:
        """The leaf drained for the queued gang (None: no gang waits, or a leaf holds it).
        Without a named leaf, the one with the most idle nodes is chosen and kept."""
        need = self.need
        if need is None or need < 2 or self.planned:
            return None
        if self.able_for_need:  # a leaf holds it (idle >= need implies size >= need)
            return None
        if self.target is not None and self.size[self.target] >= need:
            return self.target
        big = [lid for lid in range(len(self.flags)) if self.size[lid] >= need]
        if not big:
            return None
        self.target = max(big, key=lambda lid: (self.idle[lid], -lid))
        return self.target

    def set_drain(self, nodes: int | None, leaf: str | None) -> list[int]:
        """A gang of ``nodes`` waits for ``leaf``; return the leaves whose flags changed."""
        self.drain_for = nodes
        named = self.leaf_ids.get(leaf or "")
        if named is not None or nodes is None:
            self.target = named
        return self.recompute()

    def recompute(self) -> list[int]:
        """Recompute every leaf's flags; return the leaves whose flags changed."""
        self.able_for_gang.clear()
        self.able_for_need.clear()
        for lid in range(len(self.flags)):
            self._classify(lid)
        self.stale = False
        self.marks = self._current_marks()
        return self._refresh(range(len(self.flags)))

    def update(self, i: int, counted: bool, idle: bool) -> list[int]:
        """Node ``i`` changed; return the leaves whose flags changed (their nodes need
        new keys)."""
        lid = self.leaf[i]
        if lid < 0 or (counted == self.counted[i] and idle == self.node_idle[i]):
            return []
        self._record(i, counted, idle)
        if self.stale:
            return self.recompute()
        before, after = self.marks, self._current_marks()
        self.marks = after
        affected = {lid} | before.draining | after.draining | before.kept | after.kept
        if before.last != after.last:  # LAST is on the gang-capable leaves
            affected |= self.able_for_gang
        return self._refresh(sorted(affected))

    def _current_marks(self) -> _Marks:
        drained = self.drained()
        kept = self.kept() if drained is None else []
        draining = {lid for lid, n in self.extra.items() if self.idle[lid] < n}
        if drained is not None:
            draining.add(drained)
        return _Marks(frozenset(draining), frozenset(kept),
                      len(self.able_for_gang) <= self.reserve)

    def _refresh(self, lids: Iterable[int]) -> list[int]:
        """Re-derive the flags of ``lids`` (ascending); return those that changed."""
        changed: list[int] = []
        for lid in lids:
            new = self._leaf_flags(lid)
            if new != self.flags[lid]:
                self.flags[lid] = new
                changed.append(lid)
        return changed

    def _leaf_flags(self, lid: int) -> int:
        marks, idle, size = self.marks, self.idle[lid], self.size[lid]
        new = IN_FABRIC
        if lid in marks.draining:
            new |= DRAIN
        if lid in marks.kept:
            new |= KEEP
        if size and idle == size:
            new |= WHOLE
        if self.gang is not None and idle == self.gang:
            new |= EDGE
        if marks.last and lid in self.able_for_gang:
            new |= LAST
        if size:
            new |= (IDLE_STEPS * idle // size) << IDLE_SHIFT
        return new


def break_cost(flags: int, node_broken: bool, domains_broken: int) -> float:
    """Cost of a placement by the leaf flags of its node (see the module docstring)."""
    if not flags & IN_FABRIC:
        return 0.0
    cost = 0.25 * domains_broken
    if flags & DRAIN:
        cost += 32.0
    idle_share = (flags >> IDLE_SHIFT) / (IDLE_STEPS + 1)
    if not node_broken:
        return cost + 0.5 * idle_share
    cost += 1.0 + idle_share
    if flags & WHOLE:
        cost += 2.0
    if flags & KEEP:  # more than the drain: a kept leaf is worth more than one draining
        cost += 48.0
    if flags & EDGE:
        cost += 4.0
        if flags & LAST:
            cost += 8.0
    return cost
