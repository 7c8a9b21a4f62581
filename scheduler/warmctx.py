"""The score context kept warm between passes (issue 30, ADR 0234).

``context.score_context`` derives a pass's scoring context from the whole snapshot:
the task mix counts every lease, the fabric model takes every node's leaf and the time
each node is free of every lease, the drained leaves sort every leaf's free times.
≈ 24 ms of a one-order pass at 10,000 nodes, paid again each pass although a pass
changes a few leases. ``WarmContext`` keeps what comes from the nodes (capacity per
model, maxima, leaves) while the node list is the same, and what comes from the leases
(task counts, gang sizes, leaf gangs, per-node free times) brought up to date with the
leases gone and new since the last call, as ``scheduler.warm`` does for the working
state; the queue's part is counted afresh (a pass visits the queue anyway). The drained
leaves are recomputed only when a node's free time or the gangs they are drained for
changed.

The result equals ``score_context(snapshot, queue)`` field by field
(tests/scheduler/test_warm_incremental.py). When it also equals the last one, the
same object is returned: its fragmentation cache stays warm, and the working state's
evaluations and heaps, which depend on nothing else, can be kept with it
(``ClusterState.fork``).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scheduler.context import (
    DEFAULT_MIX,
    MAX_DRAINS,
    _lease_task,
    drain_for,
    needs_one_leaf,
    standing,
)
from scheduler.fabric import FabricModel, drain_leaf, drain_leaves, typical_gang
from scheduler.frag import FragModel, mix_of_counts, model_pressure
from scheduler.model import Lease, Node, Request, Snapshot, TaskType, Topology
from scheduler.scores import ScoreContext

Task = tuple[int, int, int, frozenset[str]]


@dataclass(frozen=True)
class _NodeFacts:
    nodes: tuple[Node, ...]
    topology: Topology
    capacity: dict[str, int]
    max_cpu: int
    max_gpus: int
    leaf_of: dict[str, str]
    largest_leaf: int
    models: tuple[str, ...]  # the GPU models of the nodes, sorted


def _node_facts(snapshot: Snapshot) -> _NodeFacts:
    capacity: dict[str, int] = {}
    leaf_of: dict[str, str] = {}
    for node in snapshot.nodes:
        capacity[node.model] = capacity.get(node.model, 0) + len(node.gpus)
        leaf = snapshot.topology.leaf_of(node.name)
        if leaf is not None:
            leaf_of[node.name] = leaf
    sizes: dict[str, int] = {}
    for leaf in leaf_of.values():
        sizes[leaf] = sizes.get(leaf, 0) + 1
    return _NodeFacts(
        tuple(snapshot.nodes), snapshot.topology, capacity,
        max((n.cpu_milli for n in snapshot.nodes), default=1) or 1,
        max((len(n.gpus) for n in snapshot.nodes), default=1) or 1,
        leaf_of, max(sizes.values(), default=0),
        tuple(sorted({n.model for n in snapshot.nodes if n.model})))


class WarmContext:
    """One per process (held by ``WarmBase``); one call at a time updates it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._facts: _NodeFacts | None = None
        self._reset_leases()
        self._last: ScoreContext | None = None
        self.reused = 0  # calls that returned the last context object

    def _reset_leases(self) -> None:
        self._leases: dict[str, Lease] = {}
        self._tasks: Counter[Task] = Counter()
        self._sizes: Counter[int] = Counter()  # len(parts) of every lease
        self._leaf_gangs: Counter[int] = Counter()  # multi-node leases under one leaf
        self._ends: dict[str, dict[str, float]] = {}  # node -> lease id -> end
        self._free_at: dict[str, float] = {}
        self._ends_gen = 0
        self._drains: dict[tuple[int, tuple[int, ...]], tuple[tuple[int, str], ...]] = {}
        self._drain: dict[tuple[int, int | None], str | None] = {}

    def forget(self) -> None:
        with self._lock:
            self._facts, self._last = None, None
            self._reset_leases()

    def context(self, snapshot: Snapshot, queue: Sequence[Request]) -> ScoreContext:
        """``score_context(snapshot, queue)``, from what the last call kept."""
        return self.context_and_models(snapshot, queue)[0]

    def context_and_models(self, snapshot: Snapshot, queue: Sequence[Request],
                           ) -> tuple[ScoreContext, tuple[str, ...]]:
        """``context``, and the sorted GPU models of the snapshot's nodes."""
        with self._lock:
            try:
                ctx = self._context(snapshot, queue)
                return ctx, (self._facts or _node_facts(snapshot)).models
            except BaseException:
                self._facts, self._last = None, None
                self._reset_leases()
                raise

    def _context(self, snapshot: Snapshot, queue: Sequence[Request]) -> ScoreContext:
        facts = self._facts
        if (facts is None or (facts.topology is not snapshot.topology
                                 and facts.topology != snapshot.topology)
                or not _same_nodes(facts.nodes, snapshot.nodes)):
            facts = self._facts = _node_facts(snapshot)
            self._reset_leases()
        self._follow(snapshot.leases, facts.leaf_of)
        mix = self._mix(snapshot, queue)
        last = self._last
        frag = last.frag if last is not None and last.frag.mix == mix else FragModel(mix)
        ctx = ScoreContext(frag=frag, max_cpu=facts.max_cpu, max_gpus=facts.max_gpus,
                           model_pressure=model_pressure(mix, facts.capacity),
                           fabric=self._fabric(queue, facts))
        if last is not None and _equal(last, ctx):
            self.reused += 1
            return last
        self._last = ctx
        return ctx

    def _mix(self, snapshot: Snapshot, queue: Sequence[Request]) -> tuple[TaskType, ...]:
        if snapshot.task_mix:
            return snapshot.task_mix
        counts = Counter(self._tasks)
        for r in queue:
            counts[(r.cpu_milli, r.gpu_milli if r.gpus else 0, r.gpus, r.models)] += 1
        return mix_of_counts(counts) or DEFAULT_MIX

    def _follow(self, leases: Sequence[Lease], leaf_of: Mapping[str, str]) -> None:
        """Bring the lease-derived counts up to ``leases`` (by id; a changed lease is
        given back and taken again)."""
        now: dict[str, Lease] = {}
        for lease in leases:
            now[lease.id] = lease
        if len(now) != len(leases):  # duplicate ids: counted from scratch, as a pass
            self._reset_leases()  # does, and from scratch again next time
            for lease in leases:
                self._count(lease, 1, leaf_of)
            self._facts = None
            return
        held = self._leases
        for key, lease in list(held.items()):
            other = now.get(key)
            if other is not lease and other != lease:
                self._count(lease, -1, leaf_of)
                del held[key]
        for key, lease in now.items():
            if key not in held:
                self._count(lease, 1, leaf_of)
                held[key] = lease

    def _count(self, lease: Lease, sign: int, leaf_of: Mapping[str, str]) -> None:
        parts = lease.parts
        if parts:
            self._tasks[_lease_task(lease)] += sign
        self._sizes[len(parts)] += sign
        if len(parts) > 1 and len({leaf_of.get(p.node) for p in parts}) == 1:
            self._leaf_gangs[len(parts)] += sign
        end = float("inf") if lease.end is None else float(lease.end)
        for part in parts:
            ends = self._ends.setdefault(part.node, {})
            if sign > 0:
                ends[lease.id] = max(ends.get(lease.id, 0.0), end)
            else:
                ends.pop(lease.id, None)
            free = max(ends.values(), default=None)
            if free is None:
                self._ends.pop(part.node, None)
                changed = self._free_at.pop(part.node, None) is not None
            else:
                free = max(0.0, free)
                changed = self._free_at.get(part.node) != free
                self._free_at[part.node] = free
            if changed:
                self._ends_gen += 1
                self._drains.clear()
                self._drain.clear()

    def _fabric(self, queue: Sequence[Request], facts: _NodeFacts) -> FabricModel | None:
        """``context.fabric_model`` from the kept counts."""
        leaf_of = facts.leaf_of
        if not leaf_of:
            return None
        gangs = [r.nodes for r in queue if r.nodes > 1]
        sizes = gangs + [s for s, n in self._sizes.items() if s > 1 for _ in range(n)]
        need = drain_for(queue)
        seen = [r.nodes for r in queue if r.nodes > 1 and needs_one_leaf(r)]
        seen += [s for s, n in self._leaf_gangs.items() if n > 0]
        keep = max((n for n in seen if n <= facts.largest_leaf), default=None)
        waiting = sorted((r.nodes for r in queue if r.nodes > 1 and needs_one_leaf(r)),
                         reverse=True)[:MAX_DRAINS]
        needs = tuple(standing(waiting, keep))
        drains = self._drains.get((self._ends_gen, needs))
        if drains is None:
            drains = self._drains[(self._ends_gen, needs)] = tuple(
                drain_leaves(leaf_of, self._free_at, needs))
        if (self._ends_gen, need) in self._drain:
            drained = self._drain[(self._ends_gen, need)]
        else:
            drained = self._drain[(self._ends_gen, need)] = drain_leaf(
                leaf_of, self._free_at, need)
        return FabricModel(leaf_of, typical_gang(sizes), max(1, len(gangs)), need,
                           drained, keep_for=keep, drains=drains)


def _equal(a: ScoreContext, b: ScoreContext) -> bool:
    return (a.frag is b.frag and a.max_cpu == b.max_cpu and a.max_gpus == b.max_gpus
            and a.model_pressure == b.model_pressure and a.fabric == b.fabric)


def _same_nodes(held: Sequence[Node], nodes: Sequence[Node]) -> bool:
    return held is nodes or (len(held) == len(nodes) and all(
        a is b or a == b for a, b in zip(held, nodes, strict=True)))
