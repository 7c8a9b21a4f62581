"""The time axis: capacity over a window, earliest start, and lease extensions.

A lease holds its GPUs over ``[start, end)``. Capacity for a window is the cluster minus
every lease overlapping it, so a request can only use GPUs that are free for its whole
window: a request that ends before a reservation starts may use its GPUs (backfill), and
nothing placed can ever delay or overlap a reservation.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence

from scheduler.attempt import find, shape_of
from scheduler.cluster import ClusterState
from scheduler.decisions import ExtensionResult
from scheduler.model import Lease, Node, NodeState, Request, Snapshot, Topology
from scheduler.policy import Policy
from scheduler.scores import ScoreContext

MAX_CANDIDATES = 256


def window_state(nodes: Sequence[Node], policy: Policy, ctx: ScoreContext,
                 leases: Sequence[Lease], start: int, end: int | None) -> ClusterState:
    return ClusterState(nodes, policy, ctx,
                        [lease for lease in leases if lease.overlaps(start, end)])


def earliest_start(
    nodes: Sequence[Node], topology: Topology, policy: Policy, ctx: ScoreContext,
    leases: Sequence[Lease], request: Request, not_before: int,
    models: frozenset[str] | None = None,
    start: tuple[ClusterState, Collection[str]] | None = None,
) -> int | None:
    """First time ``t >= not_before`` at which ``[t, t + duration)`` fits, if any.

    Candidates are ``not_before`` and every lease end after it (capacity only grows when
    a lease ends). The window state is moved incrementally from one candidate to the next.
    ``start``: a state holding exactly the ``leases`` with these ids (the pass's working
    state), forked instead of building one from nothing and taking every lease again
    (issue 30: ≈ 90 ms an unplaceable order at 5,000 nodes). Only whether the request
    fits is asked of it, which the leaf flags a working state may have gathered
    (drains) do not change.
    """
    duration = request.duration
    ends = sorted({lease.end for lease in leases
                   if lease.end is not None and lease.end > not_before})
    candidates = [not_before, *ends][:MAX_CANDIDATES]
    shape = shape_of(request, models)
    if start is None:
        state, applied = ClusterState(nodes, policy, ctx), set()
    else:
        held = start[1]
        state = start[0].fork(ctx)
        applied = {i for i, lease in enumerate(leases) if lease.id in held}
    for t, want in _windows(leases, candidates, duration):
        with state.batch():
            state.consume_all((leases[i] for i in sorted(applied - want)), -1)
            state.consume_all(leases[i] for i in sorted(want - applied))
        applied = set(want)
        if find(state, request, shape, topology) is not None:
            return t
    return None


def _windows(leases: Sequence[Lease], candidates: Sequence[int], duration: int | None,
             ) -> Iterator[tuple[int, set[int]]]:
    """Each candidate ``t`` (ascending) with the indices of the leases overlapping
    ``[t, t + duration)``, kept from one candidate to the next: a lease joins once its
    start is inside the window and leaves once it has ended (each once), where testing
    every lease at every candidate cost O(leases × candidates)."""
    by_start = sorted(range(len(leases)), key=lambda i: leases[i].start)
    by_end = sorted((i for i, lease in enumerate(leases) if lease.end is not None),
                    key=lambda i: leases[i].end or 0)
    want: set[int] = set()
    joined = ended = 0
    for t in candidates:
        window_end = None if duration is None else t + duration
        while ended < len(by_end) and (leases[by_end[ended]].end or 0) <= t:
            want.discard(by_end[ended])
            ended += 1
        while joined < len(by_start) and (window_end is None
                                           or leases[by_start[joined]].start < window_end):
            i = by_start[joined]
            if leases[i].overlaps(t, window_end):  # not ended already
                want.add(i)
            joined += 1
        yield t, want


def check_extension(snapshot: Snapshot, lease_id: str, new_end: int | None) -> ExtensionResult:
    """Can ``lease_id`` run until ``new_end``? If not, the longest end the calendar allows."""
    lease = next((le for le in snapshot.leases if le.id == lease_id), None)
    if lease is None:
        raise KeyError(lease_id)
    if lease.end is None or (new_end is not None and new_end <= lease.end):
        return ExtensionResult(True, new_end)
    usable = _nodes_usable(snapshot, lease)
    if not usable:
        return ExtensionResult(False, lease.end)
    mine = {p.node for p in lease.parts}
    others = [le for le in snapshot.leases if le.id != lease.id
              and any(p.node in mine for p in le.parts)]
    if _fits(snapshot, lease, others, new_end):
        return ExtensionResult(True, new_end)
    starts = sorted({le.start for le in others if le.start >= lease.end and
                     (new_end is None or le.start < new_end)})
    longest = lease.end
    for s in starts:
        if not _fits(snapshot, lease, others, s):
            break
        longest = s
    blocking = tuple(sorted(le.id for le in others if le.overlaps(longest, new_end)))
    return ExtensionResult(False, longest, blocking)


def _nodes_usable(snapshot: Snapshot, lease: Lease) -> bool:
    by_name = {n.name: n for n in snapshot.nodes}
    for part in lease.parts:
        node = by_name.get(part.node)
        if node is None or node.state in (NodeState.DOWN, NodeState.MAINTENANCE):
            return False
        healthy = {g.index for g in node.gpus if g.healthy}
        if any(g not in healthy for g, _ in part.gpus):
            return False
    return True


def _fits(snapshot: Snapshot, lease: Lease, others: Sequence[Lease], end: int | None) -> bool:
    assert lease.end is not None
    if end is not None and end <= lease.end:
        return True
    nodes = [n for n in snapshot.nodes if any(p.node == n.name for p in lease.parts)]
    state = ClusterState(nodes, _NULL_POLICY, _NULL_CTX)
    for other in others:
        if other.overlaps(lease.end, end):
            for part in other.parts:
                state.consume(part)
    return all(state.fits_now(p) for p in lease.parts)


def _null_policy() -> tuple[Policy, ScoreContext]:
    from scheduler.frag import FragModel
    from scheduler.policy import get_policy

    return get_policy("bestfit"), ScoreContext(FragModel(()))


_NULL_POLICY, _NULL_CTX = _null_policy()
