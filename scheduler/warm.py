"""The working state kept warm between passes (as kube-scheduler keeps its cache).

A pass used to build its ``ClusterState`` from every node and every running lease:
≈ 70 ms of the ≈ 100 ms a one-order pass costs at 10,000 nodes, paid again for each
order and each quote. ``WarmBase`` keeps the state of the last pass's running leases and
brings it up to date with the difference: leases gone (or changed) are given back, new
ones taken, through the state's own ``consume`` (keys, equivalence classes and leaf flags
follow as they do inside a pass). Each pass gets a ``fork`` of it, so nothing a pass
does (placements, holds, drains) reaches the next one.

A new fabric model (a policy that scores leaves: the drained and kept leaves follow the
running gangs' end times, so it changes with most leases while gangs run) keeps the
counts and redoes only the leaf flags and the node keys (``ClusterState.refabric``).
It is rebuilt from the snapshot, never trusted, when anything else changed: another
node list or node (state, GPUs), another policy, leaf flags that depend on the order
leases were taken in (``LeafTracker.history_free``), or a difference larger than a
rebuild. A fork equals a fresh build in every count, key and flag
(tests/scheduler/test_warm.py).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from scheduler.cluster import ClusterState
from scheduler.model import Lease, Node
from scheduler.policy import Policy
from scheduler.scores import ScoreContext
from scheduler.warmctx import WarmContext

Used = dict[tuple[str, str], int]  # milli-GPU held per (tenant, model): the quota ledger

# A difference of more leases than this share of the running ones is rebuilt instead.
REBUILD_SHARE = 0.5


@dataclass
class WarmStats:
    """How the base was obtained, pass by pass (for tests and benchmarks)."""

    reused: int = 0
    rebuilt: int = 0
    applied: int = 0  # leases given back or taken while bringing a base up to date
    refabricked: int = 0  # reused with a new fabric model: leaf flags and keys redone


class WarmBase:
    """One per process; safe to share between threads (one call brings the base up to
    date and forks it at a time; the fork is the caller's alone)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._base: ClusterState | None = None
        self._leases: dict[str, Lease] = {}
        self._used: Used = {}
        self.stats = WarmStats()
        # The score context, kept the same way (``scheduler.warmctx``).
        self.context = WarmContext()

    def forget(self) -> None:
        with self._lock:
            self._base, self._leases, self._used = None, {}, {}
        self.context.forget()

    def state(self, nodes: Sequence[Node], policy: Policy, ctx: ScoreContext,
              running: Iterable[Lease]) -> ClusterState:
        """A state of ``nodes`` holding ``running`` (the leases running now), scored
        with ``ctx``: the warm base brought up to date and forked, or a fresh build."""
        return self.state_and_used(nodes, policy, ctx, running)[0]

    def state_and_used(self, nodes: Sequence[Node], policy: Policy, ctx: ScoreContext,
                       running: Iterable[Lease]) -> tuple[ClusterState, Used]:
        """``state``, and the milli-GPU ``running`` holds per (tenant, model) (what
        ``QuotaLedger`` counts; kept with the base instead of summed every pass)."""
        leases = {lease.id: lease for lease in running}
        with self._lock:
            base = self._base
            try:
                fits = base is not None and self._fits(base, nodes, policy, ctx, leases)
            except BaseException:
                self._base, self._leases, self._used = None, {}, {}  # half brought up
                raise  # to date: drop it
            if base is None or not fits:
                base = ClusterState(nodes, policy, ctx, leases.values())
                used = _used_by(leases.values())
                self.stats.rebuilt += 1
                if not _history_free(base):
                    self._base, self._leases, self._used = None, {}, {}
                    return base, used
            else:
                self.stats.reused += 1
                used = self._used
            self._base, self._leases, self._used = base, leases, used
            return base.fork(ctx), dict(used)

    def _fits(self, base: ClusterState, nodes: Sequence[Node], policy: Policy,
              ctx: ScoreContext, leases: dict[str, Lease]) -> bool:
        """Whether ``base`` can be brought up to ``leases``; if so, bring it."""
        if (base.policy is not policy or not _same_nodes(base.nodes, nodes)
                or not _history_free(base)):
            return False
        old = self._leases
        get_new, get_old = leases.get, old.get
        gone = [lease for key, lease in old.items()  # ``is`` first: the common case
                if get_new(key) is not lease and not _same(get_new(key), lease)]
        new = [lease for key, lease in leases.items()
               if get_old(key) is not lease and not _same(get_old(key), lease)]
        if len(gone) + len(new) > REBUILD_SHARE * len(leases) + 64:
            return False
        base.consume_all(gone, -1)
        base.consume_all(new)
        _count_used(self._used, gone, -1)
        _count_used(self._used, new, 1)
        if policy.uses_fabric and base.ctx.fabric != ctx.fabric:
            if not base.refabric(ctx):
                return False
            self.stats.refabricked += 1
        base.forget_changes()  # the base never places: nothing reads its change logs
        self.stats.applied += len(gone) + len(new)
        return True


def _used_by(leases: Iterable[Lease]) -> Used:
    used: Used = {}
    _count_used(used, leases, 1)
    return used


def _count_used(used: Used, leases: Iterable[Lease], sign: int) -> None:
    """As ``QuotaLedger.add`` for each lease (an entry that drops to 0 is removed: a
    ledger reads a missing entry as 0)."""
    for lease in leases:
        key = (lease.tenant, lease.model)
        total = used.get(key, 0) + sign * lease.milli
        if total or sign > 0:
            used[key] = total
        else:
            used.pop(key, None)


def _same_nodes(held: Sequence[Node], nodes: Sequence[Node]) -> bool:
    """The same nodes in the same order (the portal's cached nodes are the same objects
    from pass to pass; a node replaced, e.g. cordoned as unreachable, is compared)."""
    return held is nodes or (len(held) == len(nodes) and all(
        a is b or a == b for a, b in zip(held, nodes, strict=True)))


def _same(held: Lease | None, lease: Lease) -> bool:
    """The lease book hands out the same objects while a lease is unchanged."""
    return held is lease or held == lease


def _history_free(state: ClusterState) -> bool:
    return state.leaves is None or state.leaves.history_free()
