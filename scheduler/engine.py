"""The public entry points: ``schedule_pass`` and ``quote``.

One pass builds a private working state from the snapshot, orders the queue (priority,
fair share, age) and decides each request in turn, so later requests see earlier
placements. Nothing here reads a clock or does I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import replace

from scheduler import gcpause
from scheduler.attempt import Found, breakdown, commit, find, shape_of
from scheduler.cluster import ClusterState
from scheduler.context import free_at, needs_one_leaf, score_context
from scheduler.decisions import Decision, PassResult, Placement, Quote, Reason, Unplaceable
from scheduler.fairshare import decayed_usage, order_queue
from scheduler.model import Lease, Locality, Request, Snapshot
from scheduler.nodestate import Shape
from scheduler.policy import get_policy
from scheduler.preempt import (
    CandidateIndex,
    Reclaimer,
    find_with_victims,
    reclaimable,
    reclaimer,
    reclaims,
)
from scheduler.quota import Admission, QuotaLedger
from scheduler.reservation import plan_hold
from scheduler.reserve import plan_reserve
from scheduler.warm import WarmBase
from scheduler.windows import earliest_start, window_state


def effective(request: Request, now: int) -> Request:
    """A request whose start has passed starts now and keeps its duration."""
    if request.start >= now:
        return request
    end = None if request.end is None else request.end + (now - request.start)
    return replace(request, start=now, end=end)


# Reasons for which a leaf-required gang gets the EASY reservation (room, not quota).
HOLD_REASONS = frozenset({Reason.TOPOLOGY, Reason.INSUFFICIENT_CAPACITY,
                          Reason.FRAGMENTATION, Reason.PRIORITY, Reason.RESERVED})


class _Pass:
    def __init__(self, snapshot: Snapshot, queue: Sequence[Request], now: int,
                 policy: str | None, warm: WarmBase | None = None) -> None:
        self.snapshot, self.now = snapshot, now
        self.policy = get_policy(policy)
        if warm is None:
            self.ctx = score_context(snapshot, queue)
            models = sorted({n.model for n in snapshot.nodes if n.model})
        else:  # kept between passes (scheduler.warmctx)
            self.ctx, kept = warm.context.context_and_models(snapshot, queue)
            models = list(kept)
        self.committed: dict[str, Lease] = {le.id: le for le in snapshot.leases}
        self.active = {le.id: le for le in snapshot.leases if le.overlaps(now, now + 1)}
        # Active leases that some request may reclaim (spot or borrowed).
        self.preemptible = {k: le for k, le in self.active.items() if le.preemptible}
        # node index -> preemptible leases, built when a request first needs victims
        # (``pre_on``; ≈ 2 ms of a one-order pass at 10,000 nodes that needs none).
        self._pre_on: dict[int, dict[str, Lease]] | None = None
        # The preemptible leases each kind of request may reclaim, in the order of
        # ``preemptible`` (kept with it by ``_index_preemptible`` once a kind is asked).
        self._cands: dict[Reclaimer, dict[str, Lease]] = {}
        self.future = [le for le in snapshot.leases if le.start > now]
        self._warm = warm
        if warm is None:
            self.base = self._state(self.active.values())
            self.ledger = QuotaLedger(self.active.values())
        else:  # the warm base forked, and the ledger kept with it
            self.base, used = warm.state_and_used(snapshot.nodes, self.policy, self.ctx,
                                                  self.active.values())
            self.ledger = QuotaLedger.of(used)
        self.models = models
        self._initial: ClusterState | None = None
        self._empty: ClusterState | None = None
        self._fixed: dict[tuple[str, Shape, int, Locality | None, bool], bool] = {}

    def _state(self, leases: Iterable[Lease]) -> ClusterState:
        return ClusterState(self.snapshot.nodes, self.policy, self.ctx, leases)

    def _running_state(self, running: Iterable[Lease]) -> ClusterState:
        """A fresh state of the leases running at the start of the pass (a fork of the
        warm base when the caller keeps one)."""
        if self._warm is None:
            return self._state(running)
        return self._warm.state(self.snapshot.nodes, self.policy, self.ctx, running)

    def decide(self, request: Request, want_earliest: bool) -> Decision:
        req = effective(request, self.now)
        quota = self.snapshot.quotas.get(req.tenant)
        adm = self.ledger.admit(req, quota, self.models)
        if adm.reason is not None:
            return Unplaceable(req.id, adm.reason, "tenant quota")
        shape = shape_of(req, adm.models if quota is not None else None)
        if req.start > self.now:
            return self._reserve(req, shape, adm, want_earliest)
        overlay = [le for le in self.future if le.overlaps(req.start, req.end)]
        self._apply(overlay, 1)
        decision = self._place_now(req, shape, adm)
        self._apply(overlay, -1)
        if decision is not None:
            return decision
        return self._explain(req, shape, adm, want_earliest)

    def _apply(self, leases: Sequence[Lease], sign: int) -> None:
        if leases:  # most orders overlap no future lease: skip the batch's set-up
            self.base.consume_all(leases, sign)

    def _place_now(self, req: Request, shape: Shape, adm: Admission) -> Placement | None:
        found = find(self.base, req, shape, self.snapshot.topology)
        victims: tuple[Lease, ...] = ()
        if found is None:
            guaranteed = bool(adm.guaranteed)
            cands = self._candidates(req, guaranteed)
            if not cands:
                return None
            pshape = replace(shape, models=adm.guaranteed) if guaranteed else shape
            index = CandidateIndex(
                self.pre_on, (int(req.priority), guaranteed, req.tenant if guaranteed else ""),
                lambda leases: reclaimable(leases, req, guaranteed))
            pre = find_with_victims(self.base, req, pshape, self.snapshot.topology, cands,
                                    index)
            if pre is None:  # also when only nodes held for a gang would do
                return None
            found, victims, shape = pre.found, pre.victims, pshape
            for v in victims:
                self.active.pop(v.id, None)
                if self.preemptible.pop(v.id, None) is not None:
                    self._index_preemptible(v, False)
                self.committed.pop(v.id, None)
                self.ledger.add(v.tenant, v.model, -v.milli)
        return self._commit(self.base, req, shape, adm, found, victims)

    def _candidates(self, req: Request, guaranteed: bool) -> Collection[Lease]:
        """``reclaimable`` over the preemptible leases (in their order), kept per request
        kind as leases come and go: an order that does not fit used to filter every
        preemptible lease (issue 30)."""
        kind = reclaimer(req, guaranteed)
        kept = self._cands.get(kind)
        if kept is None:
            kept = self._cands[kind] = {
                le.id: le for le in reclaimable(list(self.preemptible.values()), req,
                                                guaranteed)}
        return kept.values()  # read, not kept: the pass changes it after the search

    def _index_preemptible(self, lease: Lease, add: bool) -> None:
        for kind, kept in self._cands.items():
            if add and reclaims(kind, lease):
                kept[lease.id] = lease
            else:
                kept.pop(lease.id, None)
        if self._pre_on is not None:
            self._on_nodes(self._pre_on, lease, add)

    @property
    def pre_on(self) -> dict[int, dict[str, Lease]]:
        """The preemptible leases per node index, in the order of ``preemptible`` (as
        if kept from the start of the pass)."""
        if self._pre_on is None:
            self._pre_on = {}
            for lease in self.preemptible.values():
                self._on_nodes(self._pre_on, lease, True)
        return self._pre_on

    def _on_nodes(self, pre_on: dict[int, dict[str, Lease]], lease: Lease,
                  add: bool) -> None:
        for part in lease.parts:
            i = self.base.index.get(part.node)
            if i is None:
                continue
            if add:
                pre_on.setdefault(i, {})[lease.id] = lease
            else:
                pre_on.get(i, {}).pop(lease.id, None)

    def _commit(self, state: ClusterState, req: Request, shape: Shape, adm: Admission,
                found: Found, victims: tuple[Lease, ...] = ()) -> Placement:
        score = breakdown(state, shape, found)
        parts = commit(state, shape, found)
        model = state.nodes[found.choices[0].node].model
        borrowed = req.tenant in self.snapshot.quotas and model not in adm.guaranteed
        lease = Lease(req.id, req.tenant, req.priority, parts, req.start, req.end,
                      borrowed, model)
        self.committed[lease.id] = lease
        if req.start > self.now:
            self.future.append(lease)
        else:
            self.active[lease.id] = lease
            if lease.preemptible:
                self.preemptible[lease.id] = lease
                self._index_preemptible(lease, True)
            self.ledger.add(req.tenant, model, lease.milli)
        return Placement(req.id, parts, req.start, req.end, model, borrowed,
                         tuple(v.id for v in victims), score)

    def _reserve(self, req: Request, shape: Shape, adm: Admission,
                 want_earliest: bool) -> Decision:
        state = window_state(self.snapshot.nodes, self.policy, self.ctx,
                             list(self.committed.values()),
                             req.start, req.end)
        found = find(state, req, shape, self.snapshot.topology)
        if found is not None:
            return self._commit(state, req, shape, adm, found)
        when = self._earliest(req, shape) if want_earliest else None
        return Unplaceable(req.id, Reason.RESERVED, "window is booked", when)

    def _earliest(self, req: Request, shape: Shape) -> int | None:
        return earliest_start(self.snapshot.nodes, self.snapshot.topology, self.policy,
                              self.ctx, list(self.committed.values()), req, req.start,
                              shape.models, (self.base, self.active.keys()))

    def reserve_for(self, ordered: Sequence[Request]) -> None:
        """Gang reserve (policies with ``reserve``, fabric only): every queued
        leaf-required gang owns the leaf that frees soonest, and leaves are kept whole
        ahead for the largest leaf gang seen (scheduler/reserve.py); it replaces the
        soft drains."""
        fabric, settings = self.ctx.fabric, self.policy.reserve
        if settings is None or fabric is None or self.base.leaves is None:
            return
        waiting = [(r.id, r.nodes) for r in ordered if r.nodes > 1 and needs_one_leaf(r)]
        self.base.set_reserve(plan_reserve(waiting, fabric.keep_for, fabric.leaf_of,
                                           free_at(list(self.active.values())), self.now,
                                           settings))
        self.base.set_drain(None, None)
        self.base.set_drains(())

    def hold_for(self, request: Request, decision: Unplaceable) -> None:
        """EASY backfill: the first of the largest queued leaf-required gangs that is not
        placed (for want of room, not quota) holds the nodes of the leaf that frees
        soonest; the requests decided after it use them only if the hold admits them."""
        fabric = self.ctx.fabric
        if (not self.policy.holds or fabric is None or self.base.leaves is None
                or self.base.hold is not None
                or request.nodes < 2 or request.nodes != fabric.drain_for
                or not needs_one_leaf(request) or decision.reason not in HOLD_REASONS):
            return
        hold = plan_hold(request.id, request.nodes, fabric.leaf_of,
                         free_at(list(self.active.values())), self.now)
        if hold is not None:  # the hold replaces the drain: backfill may use the leaf
            self.base.set_hold(hold)
            self.base.set_drain(None, None)

    def _explain(self, req: Request, shape: Shape, adm: Admission,
                 want_earliest: bool) -> Unplaceable:
        reason, detail = self._reason(req, shape)
        when = None
        # Only what never fits the empty cluster has no start; a gang blocked by
        # locality fits once running leases end (issue 11 finding 2).
        if want_earliest and self._fits_fixed("empty", req, shape):
            when = self._earliest(req, shape)
        return Unplaceable(req.id, reason, detail, when)

    def _fits_fixed(self, which: str, req: Request, shape: Shape, relax: bool = False,
                    ) -> bool:
        """Whether the request fits the empty cluster (``which="empty"``) or the state
        at the start of the pass (``"initial"``); both never change during a pass, so
        the answer is memoised per request shape."""
        memo_key = (which, shape, req.nodes, req.locality, relax)
        hit = self._fixed.get(memo_key)
        if hit is None:
            if which == "empty":
                if self._empty is None:
                    self._empty = self._state(())
                state = self._empty
            else:
                if self._initial is None:
                    self._initial = self._running_state(
                        le for le in self.snapshot.leases
                        if le.overlaps(self.now, self.now + 1))
                state = self._initial
            hit = find(state, req, shape, self.snapshot.topology, relax) is not None
            self._fixed[memo_key] = hit
        return hit

    def _reason(self, req: Request, shape: Shape) -> tuple[Reason, str]:
        topo = self.snapshot.topology
        relaxed = shape_of(req, shape.models, True)
        if not self._fits_fixed("empty", req, shape):
            if self._fits_fixed("empty", req, relaxed, True):
                return Reason.TOPOLOGY, "required locality can never be met"
            return Reason.NO_MATCHING_GPUS, "no node set of an allowed model holds it"
        fits_now = find(self.base, req, shape, topo) is not None
        hold, reserve = self.base.hold, self.base.reserve
        if not fits_now and (hold is not None or reserve is not None) and find(
                self.base, req, shape, topo, hold=False) is not None:
            blocked = "" if reserve is None else reserve.detail(req.id, req.end, req.nodes)
            return Reason.RESERVED, blocked or (hold.detail if hold is not None else "")
        if not fits_now and find(self.base, req, relaxed, topo, True):
            return Reason.TOPOLOGY, "free GPUs exist but not with the required locality"
        if fits_now:
            return Reason.RESERVED, "free GPUs are held by an advance reservation"
        if self._fits_fixed("initial", req, shape):
            return Reason.PRIORITY, "capacity went to requests ahead in the queue"
        if self.base.free_milli(shape.models) >= req.total_milli:
            return Reason.FRAGMENTATION, "enough free GPU in total, but scattered"
        return Reason.INSUFFICIENT_CAPACITY, "not enough free GPUs"


def queue_order(snapshot: Snapshot, queue: Sequence[Request], now: int) -> list[Request]:
    """The order a pass considers ``queue`` in (priority, fair share, age): the queue
    position a waiting order is shown is its index here."""
    usage = decayed_usage(snapshot.usage, now, snapshot.fair_share)
    return order_queue(queue, usage, snapshot.quotas)


def schedule_pass(snapshot: Snapshot, queue: Sequence[Request], now: int,
                  policy: str | None = None, *, earliest_start_limit: int = 32,
                  warm: WarmBase | None = None) -> PassResult:
    """Decide every queued request (in queue order); the first ``earliest_start_limit``
    unplaceable ones also get an earliest start from the calendar. ``warm``: the
    caller's working state kept between passes (``scheduler.warm``; the same decisions,
    less work)."""
    with gcpause.paused():
        run = _Pass(snapshot, queue, now, policy, warm)
        decisions: list[Decision] = []
        budget = earliest_start_limit
        ordered = queue_order(snapshot, queue, now)
        run.reserve_for(ordered)
        for request in ordered:
            decision = run.decide(request, budget > 0)
            if isinstance(decision, Unplaceable):
                budget -= 1
                run.hold_for(request, decision)
            decisions.append(decision)
        # The pass's working state freed while the collector is still off: when it
        # comes back on, its first collection walks the young objects still alive, and
        # with the fork's heaps and memos alive that was ≈ 0.1 s at 10,000 nodes.
        del run
    return PassResult(tuple(decisions))


def quote(snapshot: Snapshot, request: Request, now: int,
          policy: str | None = None, *, warm: WarmBase | None = None) -> Quote:
    """Preview one request against the snapshot (nothing is committed anywhere)."""
    with gcpause.paused():
        run = _Pass(snapshot, [request], now, policy, warm)
        run.reserve_for([request])
        decision = run.decide(request, True)
        del run  # freed while the collector is off (see ``schedule_pass``)
    if isinstance(decision, Placement):
        return Quote(True, None, decision.start, decision)
    return Quote(False, decision.reason, decision.earliest_start, None)
