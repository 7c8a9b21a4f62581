"""ClusterState's equivalence classes and non-mutating release keys stay consistent."""

from __future__ import annotations

import random

from scheduler.cluster import ClusterState
from scheduler.context import score_context
from scheduler.model import NodeAllocation
from scheduler.nodestate import Shape
from scheduler.policy import get_policy

from .builders import node, snap


def _grouped(state: ClusterState) -> dict:
    out: dict = {}
    for i, key in enumerate(state.keys):
        if state.ready[i]:
            out.setdefault(key, set()).add(i)
    return out


def test_classes_follow_every_change_and_count_feasible_agrees():
    nodes = tuple(node(f"n{i}", "H100" if i % 3 else "A100", 4, 2, cpu=32_000)
                  for i in range(12))
    state = ClusterState(nodes, get_policy(), score_context(snap(nodes), []))
    rng = random.Random(5)
    held: list[NodeAllocation] = []
    shapes = [Shape(frozenset(), 1, 500, 1000, 0), Shape(frozenset(), 2, 1000, 0, 0),
              Shape(frozenset({"A100"}), 4, 1000, 0, 0)]
    for _ in range(300):
        roll = rng.random()
        if roll < 0.5:
            shape = rng.choice(shapes)
            choice = state.best(shape)
            if choice is not None:
                held.append(state.place(choice.node, shape, choice.option))
        elif roll < 0.85 and held:
            state.release(held.pop(rng.randrange(len(held))))
        else:
            state.set_ready(rng.randrange(len(nodes)), rng.random() < 0.7)
        assert {k: set(m) for k, m in state.classes.items()} == _grouped(state)
        for shape in shapes:
            feasible = [i for i in range(len(nodes)) if state.eval_node(i, shape)]
            assert state.count_feasible(shape) == len(feasible)
            assert [c.node for c in state.feasible_nodes(shape)] == feasible
        assert state.free_milli() == sum(
            sum(state.gpu_free[i].values()) for i in range(len(nodes)) if state.ready[i])


def test_key_released_equals_the_key_after_a_real_release():
    nodes = (node("a", "H100", 8, 2, cpu=64_000),)
    state = ClusterState(nodes, get_policy(), score_context(snap(nodes), []))
    parts = [NodeAllocation("a", ((0, 1000), (5, 1000)), 8000, 100),
             NodeAllocation("a", ((1, 300),), 2000, 0)]
    for part in parts:
        state.consume(part)
    version = state.version[0]
    virtual = state.key_released(0, parts[:1])
    assert state.version[0] == version  # nothing moved
    state.release(parts[0])
    assert state.keys[0] == virtual
