"""Issue 30, the last part of the 5,000-order pass target (ADR 0234, round five): what
a pass no longer does twice. The decisions themselves are covered by
``test_warm_incremental.py`` (a kept pass equals a fresh one) and by the bench
comparison recorded in the ADR."""

from __future__ import annotations

import random
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from scheduler import engine, gcpause, preempt
from scheduler.bench.workload import cluster, prefill, queue
from scheduler.cluster import ClusterState
from scheduler.context import score_context
from scheduler.decisions import Placement
from scheduler.nodestate import Shape
from scheduler.policy import get_policy

from .builders import lease, node, snap


def test_a_tenant_view_is_built_once_per_node_version() -> None:
    s = snap((node("part", gpus=2),),
             leases=(lease("p", "part", [0], milli=500, tenant="A"),))
    state = ClusterState(s.nodes, get_policy(), score_context(s, []), s.leases)
    assert state.mixed == {0}
    small = Shape(frozenset(), gpus=1, milli=300, cpu=1000, mem=1024, tenant="B")
    other = Shape(frozenset(), gpus=1, milli=250, cpu=2000, mem=1024, tenant="B")
    first = state.view(0, small)
    assert state.view(0, other) is first  # the same tenant, the same node version
    assert first[2][0] == 0  # A's partly used GPU reads full to B
    state.consume(state.place(0, small, state.eval_node(0, small)[1]), tenant="B")
    again = state.view(0, small)
    assert again is not first
    fresh = ClusterState(s.nodes, get_policy(), score_context(s, []), s.leases)
    fresh.consume(fresh.place(0, small, fresh.eval_node(0, small)[1]), tenant="B")
    assert again == fresh.view(0, small)


def test_a_victim_option_is_searched_once_per_node_version(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A gang read its best victim options afresh on every search; they are kept with
    the heap entries now, searched once per (node, version, shape, request kind)."""
    seen: list[tuple[int, int, int, object, int]] = []
    real = preempt._node_option

    def counted(state: ClusterState, i: int, sid: int, shape: Shape,
                index: preempt.CandidateIndex) -> Any:
        seen.append((id(state), i, state.version[i], index.kind, sid))
        return real(state, i, sid, shape, index)

    monkeypatch.setattr(preempt, "_node_option", counted)
    rng = random.Random(7)
    s = prefill(cluster(200), rng)
    result = engine.schedule_pass(s, queue(400, rng), 0)
    assert any(isinstance(d, Placement) and d.victims for d in result.decisions)
    assert seen and len(seen) == len(set(seen))


def test_the_pass_state_is_freed_before_the_collector_comes_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The collector's first run after a pass walks the young objects still alive: the
    fork (heaps, memos) must be gone by then."""
    forks: list[weakref.ref[ClusterState]] = []
    real_init = engine._Pass.__init__

    def init(self: engine._Pass, *args: Any, **kw: Any) -> None:
        real_init(self, *args, **kw)
        forks.append(weakref.ref(self.base))

    alive_at_exit: list[bool] = []
    real_paused = gcpause.paused

    @contextmanager
    def paused() -> Iterator[None]:
        with real_paused():
            yield
            alive_at_exit.append(any(ref() is not None for ref in forks))

    monkeypatch.setattr(engine._Pass, "__init__", init)
    monkeypatch.setattr(engine.gcpause, "paused", paused)
    rng = random.Random(3)
    s = prefill(cluster(40), rng)
    orders = queue(30, rng)
    engine.schedule_pass(s, orders, 0)
    engine.quote(s, orders[0], 0)
    assert forks and alive_at_exit == [False, False]
