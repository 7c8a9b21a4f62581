"""Choosing preemption victims that free a placeable shape.

Only spot leases, and borrowed leases of other tenants when the request stays within
its tenant's guarantee, are reclaimable; spot requests never preempt. Per node, victims
are taken greedily (spot before borrowed, newest first, smallest first) until the shape
fits; the node needing the fewest victims (then the least milli) wins, so victims free
one placeable shape instead of GPUs scattered over many nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.attempt import Found
from scheduler.cluster import Choice, ClusterState
from scheduler.gang import select_gang
from scheduler.model import Lease, PriorityClass, Request, Topology
from scheduler.nodestate import Shape


@dataclass(frozen=True)
class Preemption:
    found: Found
    victims: tuple[Lease, ...]


def reclaimable(leases: Sequence[Lease], request: Request, within_guarantee: bool,
                ) -> list[Lease]:
    if request.priority == PriorityClass.SPOT:
        return []
    return [
        lease for lease in leases
        if lease.priority == PriorityClass.SPOT
        or (within_guarantee and lease.borrowed and lease.tenant != request.tenant)
    ]


def _order(lease: Lease) -> tuple[int, int, int, str]:
    return (-int(lease.priority), -lease.start, lease.milli, lease.id)


def _victims_on(state: ClusterState, i: int, shape: Shape, leases: Sequence[Lease],
                ) -> tuple[list[Lease], Choice] | None:
    """Fewest leases on node ``i`` whose removal lets ``shape`` fit there."""
    name = state.nodes[i].name
    released = []
    found: tuple[list[Lease], Choice] | None = None
    for lease in sorted(leases, key=_order):
        part = next(p for p in lease.parts if p.node == name)
        state.release(part)
        released.append((lease, part))
        ev = state.eval_node(i, shape)
        if ev is not None:
            found = ([le for le, _ in released], Choice(i, ev[0], ev[1]))
            break
    for _, part in released:
        state.consume(part)
    return found


def find_with_victims(
    state: ClusterState, request: Request, shape: Shape, topology: Topology,
    candidates: Sequence[Lease],
) -> Preemption | None:
    """A placement that becomes possible after preempting some ``candidates``."""
    by_node: dict[int, list[Lease]] = {}
    for lease in candidates:
        for part in lease.parts:
            i = state.index.get(part.node)
            if i is not None and state.ready[i]:
                by_node.setdefault(i, []).append(lease)
    options: list[tuple[list[Lease], Choice]] = []
    for i in sorted(by_node):
        hit = _victims_on(state, i, shape, by_node[i])
        if hit is not None:
            options.append(hit)
    if request.nodes == 1:
        if not options:
            return None
        victims, choice = min(options, key=lambda o: (len(o[0]), sum(v.milli for v in o[0]),
                                                      o[1].node))
        return _finish(state, shape, [choice], 0, victims)
    return _gang(state, request, shape, topology, options)


def _gang(state: ClusterState, request: Request, shape: Shape, topology: Topology,
          options: list[tuple[list[Lease], Choice]]) -> Preemption | None:
    victims_of = {c.node: v for v, c in options}
    pool = [Choice(c.node, (0.0, *c.cost), c.option) for c in state.feasible_nodes(shape)]
    pool += [Choice(c.node, (float(len(v)), *c.cost), c.option) for v, c in options
             if c.node not in {p.node for p in pool}]
    names = [n.name for n in state.nodes]
    picked = select_gang(pool, request.nodes, names, topology, request.locality)
    if picked is None:
        return None
    choices, hops = picked
    victims = [v for c in choices for v in victims_of.get(c.node, [])]
    return _finish(state, shape, choices, hops, victims)


def _finish(state: ClusterState, shape: Shape, choices: Sequence[Choice], hops: int,
            victims: Sequence[Lease]) -> Preemption | None:
    """Release the victims for real and re-evaluate the chosen nodes."""
    unique = {v.id: v for v in victims}
    for lease in unique.values():
        for part in lease.parts:
            state.release(part)
    fresh = []
    for c in choices:
        ev = state.eval_node(c.node, shape)
        if ev is None:  # cannot happen: capacity only grew
            for lease in unique.values():
                for part in lease.parts:
                    state.consume(part)
            return None
        fresh.append(Choice(c.node, ev[0], ev[1]))
    found = Found(tuple(sorted(fresh, key=lambda c: c.node)), hops)
    return Preemption(found, tuple(sorted(unique.values(), key=lambda v: v.id)))
