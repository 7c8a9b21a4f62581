"""Choosing preemption victims that free a placeable shape.

Only spot leases, and borrowed leases of other tenants when the request stays within
its tenant's guarantee, are reclaimable; spot requests never preempt. Per node, victims
are taken greedily (spot before borrowed, newest first, smallest first) until the shape
fits; the node needing the fewest victims (then the least milli) wins, so victims free
one placeable shape instead of GPUs scattered over many nodes. A gang chooses among the
free nodes and the ``GANG_VICTIM_NODES`` nodes needing the fewest victims.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass

from scheduler.attempt import Found
from scheduler.cluster import Choice, ClusterState
from scheduler.gang import select_gang
from scheduler.model import Lease, PriorityClass, Request, Topology
from scheduler.nodestate import Option, Shape
from scheduler.policy import Cost


@dataclass(frozen=True)
class Preemption:
    found: Found
    victims: tuple[Lease, ...]


@dataclass(frozen=True)
class CandidateIndex:
    """Preemptible leases per node index (kept up to date by the caller), the request
    kind they are filtered for, and the filter (``reclaimable`` for that request).

    With an index, a single-node search keeps a heap of per-node victim options per
    (shape, kind) on the state, which catches up with the nodes changed since it was last
    used, so a search costs the changed nodes instead of every node with a candidate."""

    on_node: Mapping[int, Mapping[str, Lease]]
    kind: Hashable
    select: Callable[[Sequence[Lease]], list[Lease]]


# What decides which leases a request may reclaim: (a spot request, within its
# tenant's guarantee, its tenant when within it, else "").
Reclaimer = tuple[bool, bool, str]


def reclaimer(request: Request, within_guarantee: bool) -> Reclaimer:
    return (request.priority == PriorityClass.SPOT, within_guarantee,
            request.tenant if within_guarantee else "")


def reclaims(kind: Reclaimer, lease: Lease) -> bool:
    """Whether a request of ``kind`` may reclaim ``lease``."""
    spot_request, within_guarantee, tenant = kind
    if spot_request:
        return False
    return lease.priority == PriorityClass.SPOT or (
        within_guarantee and lease.borrowed and lease.tenant != tenant)


def reclaimable(leases: Sequence[Lease], request: Request, within_guarantee: bool,
                ) -> list[Lease]:
    if request.priority == PriorityClass.SPOT:
        return []
    kind = reclaimer(request, within_guarantee)
    return [lease for lease in leases if reclaims(kind, lease)]


def _order(lease: Lease) -> tuple[int, int, int, str]:
    return (-int(lease.priority), -lease.start, lease.milli, lease.id)


# A gang's preemption considers the free nodes plus at most this many nodes with victims
# (those needing the fewest victims, then the least milli, then node order); only when
# that finds no gang are all candidate nodes searched.
GANG_VICTIM_NODES = 256

VictimOption = tuple[int, int, int, list[Lease], Choice]  # (count, milli, node, ...)
KeptOption = tuple[int, VictimOption]  # (node version, its option at that version)


def _victims_on(state: ClusterState, i: int, sid: int, shape: Shape,
                leases: Sequence[Lease]) -> VictimOption | None:
    """Fewest leases on node ``i`` whose removal lets ``shape`` fit there.

    Evaluated on the state key the node would have (nothing is released, so the
    shape heaps are not disturbed) and memoised per node version, shape and candidate
    set, so a node that did not change since the last search costs one lookup.
    """
    memo_key = (i, state.version[i], sid, tuple(le.id for le in leases))
    memo = state.victim_memo
    if memo_key in memo:
        hit = memo[memo_key]
    else:
        hit = _search_node(state, i, shape, leases)
        if len(state.victim_memo) > 200_000:
            state.victim_memo.clear()
        state.victim_memo[memo_key] = hit
    if hit is None:
        return None
    picked, milli, (cost, opt) = hit
    return (len(picked), milli, i, [leases[k] for k in picked], Choice(i, cost, opt))


def _search_node(state: ClusterState, i: int, shape: Shape, leases: Sequence[Lease],
                 ) -> tuple[tuple[int, ...], int, tuple[Cost, Option]] | None:
    order = sorted(range(len(leases)), key=lambda k: _order(leases[k]))
    name = state.names[i]
    parts = [next(p for p in leases[k].parts if p.node == name) for k in order]
    # Bound: if releasing every candidate does not make room, no prefix does.
    if state.evaluate(state.key_released(i, parts, shape.tenant), shape) is None:
        return None
    for count in range(1, len(parts) + 1):
        ev = state.evaluate(state.key_released(i, parts[:count], shape.tenant),
                            shape)
        if ev is not None:
            picked = tuple(order[:count])
            return picked, sum(leases[k].milli for k in picked), ev
    return None  # pragma: no cover - the bound above guarantees a prefix fits


def _node_option(state: ClusterState, i: int, sid: int, shape: Shape,
                 index: CandidateIndex) -> VictimOption | None:
    leases = index.on_node.get(i)
    if not leases or not state.ready[i]:
        return None
    chosen = index.select(list(leases.values()))
    return _victims_on(state, i, sid, shape, chosen) if chosen else None


def _best_single(state: ClusterState, sid: int, shape: Shape, index: CandidateIndex,
                 ) -> VictimOption | None:
    """The best single-node victim option, from a lazily updated heap."""
    heap, kept = _victim_heap(state, sid, shape, index)
    while heap:
        _, _, i, ver = heap[0]
        if ver == state.version[i]:
            return kept[i][1]
        heapq.heappop(heap)
    return None


def _best_options(state: ClusterState, sid: int, shape: Shape, index: CandidateIndex,
                  limit: int) -> list[VictimOption]:
    """The ``limit`` best per-node victim options (fewest victims, least milli, node
    order) — the bounded candidate set for a gang."""
    heap, kept = _victim_heap(state, sid, shape, index)
    out = [kept[i][1] for _, _, i in _smallest_valid(heap, state.version, limit)]
    out.sort(key=lambda o: o[2])
    return out


def _smallest_valid(heap: list[tuple[int, int, int, int]], version: Sequence[int],
                    limit: int) -> list[tuple[int, int, int]]:
    """The ``limit`` smallest entries of ``heap`` whose version is current, as sorted
    ``(victims, milli, node)``: a walk down the heap from its root (a child is never
    smaller than its parent), O(k log k) for k entries visited, where sorting every
    valid entry cost ≈ 3 ms a gang at 10,000 nodes (issue 30). A node has at most one
    current entry (each push is at a new version)."""
    out: list[tuple[int, int, int]] = []
    if not heap:
        return out
    frontier = [(heap[0], 0)]
    size = len(heap)
    while frontier and len(out) < limit:
        (c, m, i, v), j = heapq.heappop(frontier)
        if v == version[i]:
            out.append((c, m, i))
        for child in (2 * j + 1, 2 * j + 2):
            if child < size:
                heapq.heappush(frontier, (heap[child], child))
    return out


def _victim_heap(state: ClusterState, sid: int, shape: Shape, index: CandidateIndex,
                 ) -> tuple[list[tuple[int, int, int, int]], dict[int, KeptOption]]:
    """The heap of victim options for (shape, request kind), caught up with the nodes
    changed since its last use (stale entries are skipped by version), and each node's
    option as of its newest entry, ``(version, option)``: a current entry's option
    is read from there instead of searched again (a gang read its 256 best options
    afresh every time, issue 30). Its candidates change only with the node's version:
    a lease's parts are taken or given back (a new version) whenever it joins or
    leaves the caller's index."""
    hkey = (sid, index.kind)
    vh = state.victim_heaps.get(hkey)
    if vh is None or len(vh[0]) > 4 * len(state.nodes) + 64:
        todo: Sequence[int] = list(index.on_node)
        heap: list[tuple[int, int, int, int]] = []
        kept: dict[int, KeptOption] = {}
    else:
        heap, _, kept = vh
        todo = list(dict.fromkeys(state.changes[vh[1]:]))
    state.victim_heaps[hkey] = (heap, len(state.changes), kept)
    version = state.version
    for i in todo:
        opt = _node_option(state, i, sid, shape, index)
        if opt is not None:
            heapq.heappush(heap, (opt[0], opt[1], i, version[i]))
            kept[i] = (version[i], opt)
    return heap, kept


def find_with_victims(
    state: ClusterState, request: Request, shape: Shape, topology: Topology,
    candidates: Collection[Lease], index: CandidateIndex | None = None,
) -> Preemption | None:
    """A placement that becomes possible after preempting some ``candidates``
    (``index``, when given, must describe the same candidates per node), never on nodes
    the state keeps from the request; the victims are released in ``state`` on return."""
    if not candidates:
        return None
    if index is not None and request.nodes == 1:
        best = _best_single(state, state.shape_id(shape), shape, index)
        if best is None:
            return None
        return _finish(state, request, shape, [best[4]], 0, best[3])
    if index is not None:
        bounded = _best_options(state, state.shape_id(shape), shape, index,
                                GANG_VICTIM_NODES)
        if not bounded:
            return None
        found = _gang(state, request, shape, topology, [(o[3], o[4]) for o in bounded])
        if found is not None or len(bounded) < GANG_VICTIM_NODES:
            return found
        # The bound may have cut the nodes a topology-feasible gang needs: full search.
    by_node: dict[int, list[Lease]] = {}
    node_index, ready = state.index, state.ready
    for lease in candidates:
        for part in lease.parts:
            i = node_index.get(part.node)
            if i is not None and ready[i]:
                by_node.setdefault(i, []).append(lease)
    sid = state.shape_id(shape)
    options: list[VictimOption] = []
    for i in sorted(by_node):
        hit = _victims_on(state, i, sid, shape, by_node[i])
        if hit is not None:
            options.append(hit)
    if not options:
        return None
    if request.nodes == 1:
        best = min(options, key=lambda o: (o[0], o[1], o[2]))
        return _finish(state, request, shape, [best[4]], 0, best[3])
    return _gang(state, request, shape, topology, [(o[3], o[4]) for o in options])


def _gang(state: ClusterState, request: Request, shape: Shape, topology: Topology,
          options: list[tuple[list[Lease], Choice]]) -> Preemption | None:
    victims_of = {c.node: v for v, c in options}
    pool = [Choice(c.node, (0.0, *c.cost), c.option) for c in state.feasible_nodes(shape)]
    free_now = {p.node for p in pool}
    pool += [Choice(c.node, (float(len(v)), *c.cost), c.option) for v, c in options
             if c.node not in free_now]
    if len(pool) < request.nodes:
        return None
    pool.sort(key=lambda c: c.node)
    picked = select_gang(pool, request.nodes, state.names, topology, request.locality,
                         state.node_groups(topology))
    if picked is None:
        return None
    choices, hops = picked
    victims = [v for c in choices for v in victims_of.get(c.node, [])]
    return _finish(state, request, shape, choices, hops, victims)


def _finish(state: ClusterState, request: Request, shape: Shape, choices: Sequence[Choice],
            hops: int, victims: Sequence[Lease]) -> Preemption | None:
    """Release the victims for real and re-evaluate the chosen nodes; None, with nothing
    released, when a chosen node is kept from the request (a hold or reserve: preempting
    there would delay the gang it is kept for)."""
    blocked = state.blocked_for(request.id, request.end, request.nodes)
    if any(c.node in blocked for c in choices):
        return None
    unique = {v.id: v for v in victims}
    for lease in unique.values():
        for part in lease.parts:
            state.release(part, lease.tenant)
    fresh = []
    for c in choices:
        ev = state.eval_node(c.node, shape)
        if ev is None:  # cannot happen: capacity only grew
            for lease in unique.values():
                for part in lease.parts:
                    state.consume(part, tenant=lease.tenant)
            return None
        fresh.append(Choice(c.node, ev[0], ev[1]))
    found = Found(tuple(sorted(fresh, key=lambda c: c.node)), hops)
    return Preemption(found, tuple(sorted(unique.values(), key=lambda v: v.id)))

