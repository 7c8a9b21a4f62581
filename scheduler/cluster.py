"""Mutable working copy of free capacity, private to one pass (or one replay).

Placing a single-node shape is a heap lookup: each shape seen keeps a heap of
``cost + (node_index, version, option)`` (flat). When a node changes it is appended to a change
log; a shape's heap catches up lazily with the nodes changed since it was last used.
Evaluations are memoised by node *state key*, so identical nodes cost one evaluation
(equivalence classes), and ties go to the lowest node index (node order).
"""

from __future__ import annotations

import heapq
from collections.abc import Container, Hashable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple

from scheduler.fabric import LeafTracker
from scheduler.groups import NodeGroups
from scheduler.keyclasses import KeyClass, KeyClasses
from scheduler.model import MILLI, Lease, Node, NodeAllocation, NodeState, Topology
from scheduler.nodestate import (
    NodeKey,
    Option,
    Shape,
    apply,
    make_key,
    make_key_of_tuples,
    options,
    total_free,
)
from scheduler.policy import Cost, Policy
from scheduler.reservation import Hold
from scheduler.reserve import GangReserve
from scheduler.scores import ScoreContext
from scheduler.tenancy import Held, foreign, hold

Eval = tuple[Cost, Option] | None
# A mixed node's heap entry, flat: the cost's tiers, then node index, node version,
# option (``cost + (node, version, option)``); ``_NODE``, ``_VERSION`` and ``_OPTION``
# index it from the end. (Flat against nested measured no difference in a whole pass.)
Entry = tuple[Any, ...]
_NODE, _VERSION, _OPTION = -3, -2, -1
# A class heap's entry (``scheduler.keyclasses``): (cost, stamp, class, option), valid
# while the stamp is live.
ClassEntry = tuple[Cost, int, KeyClass, Option]

_MEMO_LIMIT = 300_000
_MISSING: Eval = ((-1.0,), ((-1, -1),))  # memo sentinel (compared by identity)


@dataclass
class _ShapeHeap:
    heap: list[Entry]
    seen: int  # position in the change log already applied


@dataclass
class _ClassHeap:
    heap: list[ClassEntry]
    seen: int  # position in the classes' change log already applied


class Choice(NamedTuple):
    """A node for a shape: its index, the cost there and the option taken (a named
    tuple: a gang's search builds tens of thousands per pass, issue 30)."""

    node: int
    cost: Cost
    option: Option


class ClusterState:
    """``leases``: what runs already, taken in one build (each node keyed once, the leaf
    flags computed once); the same state as consuming them one by one after."""

    def __init__(self, nodes: Sequence[Node], policy: Policy, ctx: ScoreContext,
                 leases: Iterable[Lease] = ()) -> None:
        self.policy = policy
        self.ctx = ctx
        self.nodes = tuple(nodes)
        self.index = {n.name: i for i, n in enumerate(self.nodes)}
        self.names = [n.name for n in self.nodes]
        self.ready = [n.state == NodeState.READY for n in self.nodes]
        self.cpu_free = [n.cpu_milli for n in self.nodes]
        self.mem_free = [n.memory_mib for n in self.nodes]
        self.gpu_free: list[dict[int, int]] = [
            {g.index: MILLI for g in n.gpus if g.healthy} for n in self.nodes
        ]
        # Healthy GPU indices per NVLink domain (read-only: nodes alike share one list).
        self.domains: list[list[list[int]]] = self._all_domains()
        # Fractions held per GPU by tenant: {gpu: {tenant: milli}} (known tenants only).
        self.holders: list[Held] = [{} for _ in self.nodes]
        # Copy on write after a fork: the nodes whose ``holders`` entry this state owns
        # (None: all of them). A fork and its base share the others, and neither
        # changes a shared one (``_own_holders`` copies it first).
        self._owned: set[int] | None = None
        # Nodes where some tenant's fractional view differs from the node's key: a GPU
        # partly used (not exactly full) that holds a fraction (``tenancy.foreign``).
        self.mixed: set[int] = set()
        self.version = [0] * len(self.nodes)
        # Per GPU model: capacity (healthy GPU milli, any node state) and free milli on
        # ready nodes, kept incrementally (scheduler.scarcity reads them).
        self.model_cap, self.model_free = self._model_totals()
        self.leaves = (LeafTracker(ctx.fabric, self.names)
                       if ctx.fabric and policy.uses_fabric else None)
        # Flags that depend on the order leases were taken in are built by replaying them.
        replay = self.leaves is not None and not self.leaves.history_free()
        if not replay:
            self._take_all(leases)
        self._load_leaves()
        self._key_all()
        self._start_pass()
        if replay:
            self.consume_all(leases)

    def _key_all(self) -> None:
        """Every node's key and domain order, and the equivalence classes: ready nodes by
        state key (insertion-ordered sets)."""
        self.keys: list[NodeKey] = []
        self.order: list[list[int]] = []
        for i in range(len(self.nodes)):
            key, order = self._make_key(i)
            self.keys.append(key)
            self.order.append(order)
        self.kclasses = KeyClasses.built(self.keys, self.ready, self.mixed)

    def refabric(self, ctx: ScoreContext) -> bool:
        """Score with ``ctx`` from now on, its fabric model included: a new leaf tracker
        loaded from the counts as they are, and every node re-keyed (what a fresh build
        with ``ctx`` would hold). False, and nothing changed, when the new model's leaf
        flags depend on the order leases were taken in (only a build replays them)."""
        leaves = (LeafTracker(ctx.fabric, self.names)
                  if ctx.fabric and self.policy.uses_fabric else None)
        if leaves is not None and not leaves.history_free():
            return False
        self.ctx, self.leaves = ctx, leaves
        self._load_leaves()
        self._key_all()
        self._views.clear()  # the leaf flags changed without new node versions
        return True

    def _start_pass(self) -> None:
        """What one pass builds up and the next must not see: the change log, the heaps
        and evaluations (they depend on the context), holds, reserves, victim caches."""
        self.changes: list[int] = []
        self.mixed_changes: list[int] = []  # the changed nodes that were mixed after it
        # Per shape: the heap over classes (``_class_heap``), and for a tenant's
        # fractional shape the heap over the ``mixed`` nodes (``_mixed_heap``).
        self.class_heaps: dict[Shape, _ClassHeap] = {}
        self.heaps: dict[Shape, _ShapeHeap] = {}
        self.memo: dict[Shape, dict[NodeKey, Eval]] = {}  # per shape, by state key
        self._memo_size = 0
        # Score breakdowns of placements per (shape, key, option) (``attempt.breakdown``).
        self.explained: dict[tuple[Shape, NodeKey, Option], dict[str, float]] = {}
        self._groups: NodeGroups | None = None
        # EASY backfill reservation for the head-of-line leaf gang (fabric policies).
        self.hold: Hold | None = None
        self.held: frozenset[int] = frozenset()
        # Gang reserve with time-bounded backfill (scheduler/reserve.py, ADR 0155).
        self.reserve: GangReserve | None = None
        # Preemption search results per (node, version, shape, candidate lease ids):
        # (how many of the ordered candidates to preempt, evaluation) or None.
        self.victim_memo: dict[tuple[int, int, int, tuple[str, ...]],
                               tuple[tuple[int, ...], int, tuple[Cost, Option]] | None] = {}
        self._shape_ids: dict[Shape, int] = {}
        # Tenant views (``view``) per (node, tenant): (node version, view).
        self._views: dict[tuple[int, str],
                          tuple[int, tuple[NodeKey, list[int], dict[int, int]]]] = {}
        # Per (shape id, request kind): heap of (victims, milli, node, version), the
        # change-log position it has caught up with, and per node the version and victim
        # option (victims, milli, node, leases, choice) of its newest entry (see
        # scheduler.preempt).
        self.victim_heaps: dict[
            tuple[int, Hashable],
            tuple[list[tuple[int, int, int, int]], int,
                  dict[int, tuple[int, tuple[int, int, int, list[Lease], Choice]]]]] = {}
        # Inside ``batch()``: nodes and leaves whose keys are due at the end of it.
        self._due_nodes: dict[int, None] | None = None
        self._due_leaves: set[int] = set()

    def fork(self, ctx: ScoreContext) -> ClusterState:
        """An independent copy of this state for one pass scored with ``ctx`` (the warm
        base of ``scheduler.warm`` stays as it is). What never changes after a build
        (nodes, names, index, NVLink domains) is shared; every mutable count is copied;
        what a pass builds up starts empty, as in a fresh build."""
        new = object.__new__(ClusterState)
        new.policy, new.ctx = self.policy, ctx
        new.nodes, new.index, new.names, new.domains = (
            self.nodes, self.index, self.names, self.domains)
        new.ready, new.version = list(self.ready), list(self.version)
        new.cpu_free, new.mem_free = list(self.cpu_free), list(self.mem_free)
        new.gpu_free = [free.copy() for free in self.gpu_free]
        # Shared, copied on write (``_own_holders``): copying every node's holders was
        # ≈ 20 ms of a one-order pass at 10,000 nodes (issue 30).
        new.holders, new._owned, self._owned = list(self.holders), set(), set()
        new.mixed = set(self.mixed)
        new.model_cap, new.model_free = dict(self.model_cap), dict(self.model_free)
        new.leaves = None if self.leaves is None else self.leaves.copy()
        new.keys, new.order = list(self.keys), list(self.order)
        new.kclasses = self.kclasses.copy()
        new._start_pass()
        return new

    def _model_totals(self) -> tuple[dict[str, int], dict[str, int]]:
        """Per GPU model: healthy GPU milli, and the free part of it on ready nodes."""
        cap: dict[str, int] = {}
        free: dict[str, int] = {}
        for i, n in enumerate(self.nodes):
            model = n.model
            if model:
                total = sum(self.gpu_free[i].values())
                cap[model] = cap.get(model, 0) + total
                free[model] = free.get(model, 0) + (total if self.ready[i] else 0)
        return cap, free

    def _load_leaves(self) -> None:
        """Every node's state into the leaf tracker, then its flags once."""
        if self.leaves is not None:
            for i in range(len(self.nodes)):
                self.leaves.set_node(i, *self._fabric_state(i))
            self.leaves.recompute()

    def _all_domains(self) -> list[list[list[int]]]:
        shared: dict[tuple[tuple[int, int], ...], list[list[int]]] = {}
        out: list[list[list[int]]] = []
        for n in self.nodes:
            layout = tuple((g.nvlink_domain, g.index) for g in n.gpus if g.healthy)
            domains = shared.get(layout)
            if domains is None:
                domains = shared[layout] = self._domains_of(layout)
            out.append(domains)
        return out

    @staticmethod
    def _domains_of(layout: Iterable[tuple[int, int]]) -> list[list[int]]:
        """GPU indices per NVLink domain, from ``(domain, gpu index)`` pairs."""
        by_domain: dict[int, list[int]] = {}
        for domain, gpu in layout:
            by_domain.setdefault(domain, []).append(gpu)
        return [sorted(by_domain[d]) for d in sorted(by_domain)]

    def _make_key(self, i: int) -> tuple[NodeKey, list[int]]:
        n, free = self.nodes[i], self.gpu_free[i]
        doms = tuple([tuple([free[g] for g in dom]) for dom in self.domains[i]])
        return make_key_of_tuples(n.model, n.cpu_milli, n.memory_mib, self.cpu_free[i],
                                  self.mem_free[i], doms, self._fabric_flag(i))

    def _fabric_flag(self, i: int) -> int:
        return 0 if self.leaves is None else self.leaves.flag(i)

    def _fabric_state(self, i: int) -> tuple[bool, bool]:
        """(counts towards its leaf's size, idle) for node ``i``."""
        free = self.gpu_free[i]
        counted = self.ready[i] and bool(free)
        return counted, counted and all(v == MILLI for v in free.values())

    # ----------------------------------------------------------------- evaluation
    def evaluate(self, key: NodeKey, shape: Shape) -> Eval:
        """Best (cost, option) for ``shape`` on a node in state ``key``; memoised."""
        per_shape = self.memo.get(shape)
        if per_shape is None:
            per_shape = self.memo[shape] = {}
        hit = per_shape.get(key, _MISSING)
        if hit is not _MISSING:
            return hit
        best: Eval = None
        for opt in options(key, shape):
            cost = self.policy.cost(self.ctx, key, shape, opt, apply(key, shape, opt))
            if best is None or cost < best[0]:
                best = (cost, opt)
        if self._memo_size > _MEMO_LIMIT:
            self.memo.clear()
            self._memo_size = 0
            per_shape = self.memo[shape] = {}
        per_shape[key] = best
        self._memo_size += 1
        return best

    def eval_node(self, i: int, shape: Shape) -> Eval:
        return self.evaluate(self.view(i, shape)[0], shape) if self.ready[i] else None

    def _foreign(self, i: int, tenant: str, free: dict[int, int]) -> set[int]:
        return foreign(self.holders[i], tenant, free, self.nodes[i].shared_tenancy)

    def view(self, i: int, shape: Shape) -> tuple[NodeKey, list[int], dict[int, int]]:
        """Node ``i``'s key, domain order and free milli as ``shape`` may use them: for a
        fractional shape of a tenant, GPUs shared with another tenant count as full."""
        free = self.gpu_free[i]
        if not (shape.fractional and i in self.mixed):
            return self.keys[i], self.order[i], free
        # A tenant's view of a node is kept per node version: every change to a node
        # (its counts, holders, leaf flags) gives it a new version (issue 30: the same
        # view was rebuilt once per fractional shape of the tenant).
        seen = self._views.get((i, shape.tenant))
        if seen is not None and seen[0] == self.version[i]:
            return seen[1]
        foreign = self._foreign(i, shape.tenant, free)
        if not foreign:
            out = self.keys[i], self.order[i], free
        else:
            masked = {g: (0 if g in foreign else v) for g, v in free.items()}
            n = self.nodes[i]
            doms = [[masked[g] for g in dom] for dom in self.domains[i]]
            key, order = make_key(n.model, n.cpu_milli, n.memory_mib, self.cpu_free[i],
                                  self.mem_free[i], doms, self._fabric_flag(i))
            out = key, order, masked
        self._views[(i, shape.tenant)] = (self.version[i], out)
        return out

    def _class_heap(self, shape: Shape, tenant_view: bool) -> list[ClassEntry]:
        """The heap of classes for ``shape`` by cost, caught up with the classes created
        since its last use (a tenant's fractional shape leaves the mixed classes to
        ``_mixed_heap``)."""
        kc = self.kclasses
        sh = self.class_heaps.get(shape)
        if sh is None or len(sh.heap) > 4 * len(kc.members) + 64:
            entries = self._class_entries(kc.members, shape, tenant_view)
            heapq.heapify(entries)
            sh = self.class_heaps[shape] = _ClassHeap(entries, len(kc.changes))
        elif sh.seen < len(kc.changes):
            live = kc.live
            pending = [live[c] for c in kc.changes[sh.seen:] if c in live]
            for entry in self._class_entries(pending, shape, tenant_view):
                heapq.heappush(sh.heap, entry)
            sh.seen = len(kc.changes)
        return sh.heap

    def _class_entries(self, classes: Iterable[KeyClass], shape: Shape,
                       tenant_view: bool) -> list[ClassEntry]:
        stamp, out = self.kclasses.stamp, []
        for c in classes:
            if tenant_view and c[1]:
                continue
            ev = self.evaluate(c[0], shape)
            if ev is not None:
                out.append((ev[0], stamp[c], c, ev[1]))
        return out

    def _mixed_heap(self, shape: Shape) -> list[Entry]:
        """The heap of the ``mixed`` nodes for a tenant's fractional shape (each in its
        own view), caught up with the nodes changed since its last use."""
        sh = self.heaps.get(shape)
        if sh is None or len(sh.heap) > 4 * len(self.mixed) + 64:
            entries = self._entries(sorted(self.mixed), shape)
            heapq.heapify(entries)
            sh = self.heaps[shape] = _ShapeHeap(entries, len(self.mixed_changes))
        elif sh.seen < len(self.mixed_changes):
            pending = dict.fromkeys(self.mixed_changes[sh.seen:])
            heap, push = sh.heap, heapq.heappush
            for entry in self._entries(pending, shape):
                push(heap, entry)
            sh.seen = len(self.mixed_changes)
        return sh.heap

    def _entries(self, idx: Iterable[int], shape: Shape) -> list[Entry]:
        out: list[Entry] = []
        keys, ready, version = self.keys, self.ready, self.version
        # Evaluations are pure, so a reference kept across a memo reset stays correct.
        per_shape = self.memo.setdefault(shape, {})
        tenant_view = bool(shape.tenant) and shape.fractional
        mixed = self.mixed
        for i in idx:
            if not ready[i]:
                continue
            key = self.view(i, shape)[0] if tenant_view and i in mixed else keys[i]
            ev = per_shape.get(key, _MISSING)
            if ev is _MISSING:
                ev = self.evaluate(key, shape)
            if ev is not None:
                out.append(ev[0] + (i, version[i], ev[1]))
        return out

    def best(self, shape: Shape, blocked: Container[int] = frozenset()) -> Choice | None:
        """The lowest-cost node for ``shape`` (skipping the ``blocked`` node indices);
        ties go to the lowest node index."""
        tenant_view = bool(shape.tenant) and shape.fractional
        found = self._best_class(shape, blocked, tenant_view)
        if tenant_view and self.mixed:
            own = self._best_mixed(shape, blocked)
            if own is not None and (found is None or (*own.cost, own.node)
                                    < (*found.cost, found.node)):
                found = own
        return found

    def _best_class(self, shape: Shape, blocked: Container[int],
                    tenant_view: bool) -> Choice | None:
        """The lowest unblocked node among the classes of the lowest cost that have one:
        the heap's root gives the cost, a walk finds every class of that cost."""
        heap = self._class_heap(shape, tenant_view)
        kc, pop = self.kclasses, heapq.heappop
        live = kc.live
        skipped: list[ClassEntry] = []
        found: Choice | None = None
        while heap:
            top = heap[0]
            if top[1] not in live:
                pop(heap)
                continue
            cost, low, pick = top[0], -1, top
            for entry in _level(heap, cost, live):
                i: int | None = kc.lowest(entry[2])
                if i in blocked:
                    i = kc.lowest_outside(entry[2], blocked)
                if i is not None and (low < 0 or i < low):
                    low, pick = i, entry
            if low >= 0:
                found = Choice(low, cost, pick[3])
                break
            while heap and heap[0][0] == cost:  # every node of this cost is blocked
                entry = pop(heap)
                if entry[1] in live:
                    skipped.append(entry)
        for entry in skipped:
            heapq.heappush(heap, entry)
        return found

    def _best_mixed(self, shape: Shape, blocked: Container[int]) -> Choice | None:
        """The best ``mixed`` node for a tenant's fractional shape."""
        heap = self._mixed_heap(shape)
        skipped: list[Entry] = []
        found: Choice | None = None
        version, pop = self.version, heapq.heappop
        while heap:
            top = heap[0]
            i = top[_NODE]
            if top[_VERSION] != version[i]:
                pop(heap)
                continue
            if i in blocked:
                skipped.append(pop(heap))
                continue
            found = Choice(i, top[:_NODE], top[_OPTION])
            break
        for entry in skipped:
            heapq.heappush(heap, entry)
        return found

    def feasible_nodes(self, shape: Shape) -> list[Choice]:
        """Every node that can host ``shape`` now, in node order (one evaluation per
        equivalence class)."""
        out: list[Choice] = []
        for (key, _), members in self.kclasses.members.items():
            ev = self.evaluate(key, shape)
            if ev is not None:
                cost, opt = ev
                out.extend([Choice(i, cost, opt) for i in members])
        out.sort(key=lambda c: c.node)
        return out

    def shape_id(self, shape: Shape) -> int:
        """A small int standing for ``shape`` in memo keys (cheaper to hash)."""
        return self._shape_ids.setdefault(shape, len(self._shape_ids))

    def count_feasible(self, shape: Shape) -> int:
        """How many nodes can host ``shape`` now (from class-level evaluations only)."""
        return sum(len(members) for (key, _), members in self.kclasses.members.items()
                   if self.evaluate(key, shape) is not None)

    def node_groups(self, topology: Topology) -> NodeGroups:
        """Each node's switch groups per level (computed lazily, once per state)."""
        if self._groups is None or self._groups.topology is not topology:
            self._groups = NodeGroups(self.names, topology)
        return self._groups

    def key_released(self, i: int, parts: Iterable[NodeAllocation],
                     tenant: str = "") -> NodeKey:
        """Node ``i``'s state key as if ``parts`` (allocations on it) were released;
        nothing changes (no version bump, no change-log entry). With ``tenant``, GPUs
        another tenant holds a fraction of (and that stay partly used) count as full."""
        free = dict(self.gpu_free[i])
        cpu, mem = self.cpu_free[i], self.mem_free[i]
        for part in parts:
            for gpu, milli in part.gpus:
                if gpu in free:
                    free[gpu] += milli
            cpu += part.cpu_milli
            mem += part.memory_mib
        for g in self._foreign(i, tenant, free):
            free[g] = 0
        n = self.nodes[i]
        doms = [[free[g] for g in dom] for dom in self.domains[i]]
        return make_key(n.model, n.cpu_milli, n.memory_mib, cpu, mem, doms,
                        self._fabric_flag(i))[0]

    # ----------------------------------------------------------------- mutation
    def gpus_for(self, i: int, shape: Shape, option: Option) -> tuple[tuple[int, int], ...]:
        """Concrete ``(gpu_index, milli)`` pairs for an option on node ``i``."""
        _, order, free = self.view(i, shape)
        out: list[tuple[int, int]] = []
        for pos, value in option:
            dom = self.domains[i][order[pos]]
            if shape.fractional:
                gpu = next(g for g in dom if free[g] == value)
                out.append((gpu, shape.milli))
            else:
                idle = [g for g in dom if free[g] == MILLI][:value]
                out.extend((g, MILLI) for g in idle)
        return tuple(sorted(out))

    def place(self, i: int, shape: Shape, option: Option) -> NodeAllocation:
        alloc = NodeAllocation(self.nodes[i].name, self.gpus_for(i, shape, option),
                               shape.cpu, shape.mem)
        self.consume(alloc, tenant=shape.tenant)
        return alloc

    def consume(self, alloc: NodeAllocation, sign: int = 1, tenant: str = "") -> None:
        """Take (``sign=1``) or give back (``sign=-1``) an allocation's resources;
        ``tenant`` (when known) records who holds fractions of each GPU.

        GPUs that are not present (unhealthy, unknown) are ignored: their capacity is
        already excluded.
        """
        i = self._take(alloc, sign, tenant)
        if i is not None:
            self._touch(i)

    def _take(self, alloc: NodeAllocation, sign: int, tenant: str) -> int | None:
        """The resource side of :meth:`consume` (keys and leaf flags left as they are);
        return the node's index (None: not in this state)."""
        i = self.index.get(alloc.node)
        if i is None:
            return None
        free, model = self.gpu_free[i], self.nodes[i].model
        if alloc.gpus and self._owned is not None and i not in self._owned:
            self._own_holders(i)
        for gpu, milli in alloc.gpus:
            if gpu in free:
                free[gpu] -= sign * milli
                hold(self.holders[i], gpu, tenant, sign * milli, free[gpu])
                if self.ready[i] and model:
                    self.model_free[model] -= sign * milli
        self._note_mixed(i)
        self.cpu_free[i] -= sign * alloc.cpu_milli
        self.mem_free[i] -= sign * alloc.memory_mib
        return i

    def _take_all(self, leases: Iterable[Lease]) -> None:
        """``_take`` of every part of ``leases`` in a fresh build (nothing shared with
        a base), each node's ``mixed`` mark set once at the end: it depends only on the
        node's final counts and holders (issue 30: the cold pass's set-up)."""
        index, gpu_free, holders, ready = self.index, self.gpu_free, self.holders, self.ready
        model_free, cpu_free, mem_free = self.model_free, self.cpu_free, self.mem_free
        models = [n.model for n in self.nodes]
        touched: dict[int, None] = {}
        for lease in leases:
            tenant = lease.tenant
            for alloc in lease.parts:
                i = index.get(alloc.node)
                if i is None:
                    continue
                free, model, held = gpu_free[i], models[i], holders[i]
                for gpu, milli in alloc.gpus:
                    if gpu in free:
                        left = free[gpu] = free[gpu] - milli
                        hold(held, gpu, tenant, milli, left)
                        if ready[i] and model:
                            model_free[model] -= milli
                touched[i] = None
                cpu_free[i] -= alloc.cpu_milli
                mem_free[i] -= alloc.memory_mib
        for i in touched:
            self._note_mixed(i)

    def _own_holders(self, i: int) -> None:
        """Node ``i``'s holders copied before this state changes them (a fork shares
        them with its base until then)."""
        self.holders[i] = {g: dict(per) for g, per in self.holders[i].items()}
        assert self._owned is not None
        self._owned.add(i)

    def _note_mixed(self, i: int) -> None:
        held = self.holders[i]
        if not held:  # most nodes: no GPU partly held
            self.mixed.discard(i)
            return
        free = self.gpu_free[i]
        if any(free[g] < MILLI and free[g] != 0 for g in held):
            self.mixed.add(i)
        else:
            self.mixed.discard(i)

    def release(self, alloc: NodeAllocation, tenant: str = "") -> None:
        self.consume(alloc, -1, tenant)

    def set_ready(self, i: int, ready: bool) -> None:
        model = self.nodes[i].model
        if model and ready != self.ready[i]:
            total = sum(self.gpu_free[i].values())
            self.model_free[model] += total if ready else -total
        self._leave_class(i)
        self.ready[i] = ready
        self._touch(i)

    def drained_nodes(self, gang: int) -> frozenset[int]:
        """Nodes of the leaves drained or kept for a gang larger than ``gang`` nodes."""
        leaves = self.leaves
        if leaves is None:
            return frozenset()
        return frozenset(i for lid in leaves.avoid(gang) for i in leaves.members[lid])

    def set_hold(self, hold: Hold | None) -> None:
        """Hold nodes for the head-of-line gang (None: no reservation). Only a state
        that tracks leaves (a fabric policy) keeps one; others ignore it."""
        if self.leaves is None:
            hold = None
        elif hold is not None:  # the hold replaces the drained leaves
            self.set_drains(())
        self.hold = hold
        self.held = frozenset() if hold is None else frozenset(
            self.index[n] for n in hold.nodes if n in self.index)

    def blocked_for(self, request_id: str, end: int | None,
                    nodes: int = 1) -> frozenset[int]:
        """Node indices a request may not use now: the held nodes, unless the hold
        admits it (the gang itself, or work ending by the gang's start)."""
        hold = self.hold
        held = (frozenset() if hold is None or hold.admits(request_id, end, nodes)
                else self.held)
        if self.reserve is None:
            return held
        index = self.index
        return held | frozenset(index[n] for n in self.reserve.blocked(request_id, end, nodes)
                                if n in index)

    def set_reserve(self, reserve: GangReserve | None) -> None:
        """Apply a gang reserve (None: none); only a state that tracks leaves keeps one."""
        self.reserve = reserve if self.leaves is not None else None

    def set_drain(self, nodes: int | None, leaf: str | None) -> None:
        """Drain ``leaf`` for a queued gang of ``nodes`` that needs one (None: none)."""
        if self.leaves is None:
            return
        for lid in self.leaves.set_drain(nodes, leaf):
            for j in self.leaves.members[lid]:
                self._rekey(j)

    def set_drains(self, drains: Sequence[tuple[int, str]]) -> None:
        """Drain these (need, leaf) pairs too (gangs waiting behind the first)."""
        if self.leaves is None:
            return
        for lid in self.leaves.set_drains(drains):
            for j in self.leaves.members[lid]:
                self._rekey(j)

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Defer re-keying to the end of the block: each node changed in it (or in a leaf
        whose flags changed) gets its new key once, however often it changed. Nothing
        may read the state inside the block (keys, classes and heaps are stale there)."""
        if self._due_nodes is not None:  # already batching: the outer block re-keys
            yield
            return
        self._due_nodes = {}
        try:
            yield
        finally:
            self._rekey_due()

    def consume_all(self, leases: Iterable[Lease], sign: int = 1) -> None:
        """Take (``sign=1``) or give back (``sign=-1``) every part of ``leases`` as one
        batch (see :meth:`batch`)."""
        with self.batch():
            for lease in leases:
                for part in lease.parts:
                    self.consume(part, sign, lease.tenant)

    def _rekey_due(self) -> None:
        due, self._due_nodes = self._due_nodes or {}, None
        if self.leaves is not None:
            for lid in self._due_leaves:
                due.update(dict.fromkeys(self.leaves.members[lid]))
        self._due_leaves = set()
        for i in sorted(due):
            self._rekey(i)

    def _touch(self, i: int) -> None:
        """Node ``i`` changed: new key, and new keys for the nodes of every leaf whose
        fabric flags changed with it (at the end of the batch inside ``batch()``)."""
        changed = [] if self.leaves is None else self.leaves.update(i, *self._fabric_state(i))
        if self._due_nodes is not None:
            self._due_nodes[i] = None
            self._due_leaves.update(changed)
            return
        self._rekey(i)
        if self.leaves is not None:
            for lid in changed:
                for j in self.leaves.members[lid]:
                    if j != i:
                        self._rekey(j)

    def _rekey(self, i: int) -> None:
        self._leave_class(i)
        self.version[i] += 1
        key, self.order[i] = self._make_key(i)
        self.keys[i] = key
        self.changes.append(i)
        if self.ready[i]:
            mixed = i in self.mixed
            self.kclasses.join(i, (key, mixed))
            if mixed:
                self.mixed_changes.append(i)

    def forget_changes(self) -> None:
        """Drop the change logs (a state that never places: nothing reads them)."""
        self.changes.clear()
        self.mixed_changes.clear()
        self.kclasses.changes.clear()

    def _leave_class(self, i: int) -> None:
        self.kclasses.leave(i)

    @property
    def classes(self) -> dict[NodeKey, dict[int, None]]:
        """Ready nodes by state key (the classes of ``kclasses`` merged over ``mixed``)."""
        out: dict[NodeKey, dict[int, None]] = {}
        for (key, _), members in self.kclasses.members.items():
            out.setdefault(key, {}).update(members)
        return out

    # ----------------------------------------------------------------- metrics
    def fits_now(self, alloc: NodeAllocation) -> bool:
        """True if ``alloc`` could be taken without over-committing anything."""
        i = self.index.get(alloc.node)
        if i is None:
            return False
        free = self.gpu_free[i]
        return (all(g in free and free[g] >= m for g, m in alloc.gpus)
                and self.cpu_free[i] >= alloc.cpu_milli
                and self.mem_free[i] >= alloc.memory_mib)

    def free_milli(self, models: frozenset[str] = frozenset()) -> int:
        """Free GPU milli on ready nodes (of ``models``), from the class aggregates."""
        return sum(
            total_free(key) * len(members)
            for (key, _), members in self.kclasses.members.items()
            if not models or key[0] in models
        )

    def fragmentation(self) -> float:
        """Cluster fragmentation (GPU milli) against the policy context's task mix."""
        return sum(self.ctx.frag.frag(self.keys[i])
                   for i in range(len(self.nodes)) if self.ready[i])


def _level(heap: list[ClassEntry], cost: Cost, live: dict[int, KeyClass],
           ) -> list[ClassEntry]:
    """The valid entries of ``heap`` whose cost is ``cost``, the cost at its root: a walk
    from the root down through the entries of that cost (a child never costs less than
    its parent), stale ones included, as they may sit above valid ones."""
    out: list[ClassEntry] = []
    todo, size = [0], len(heap)
    while todo:
        j = todo.pop()
        entry = heap[j]
        if entry[0] != cost:
            continue
        if entry[1] in live:
            out.append(entry)
        todo.extend(k for k in (2 * j + 1, 2 * j + 2) if k < size)
    return out
