"""Issue 11: orders that name several GPU models spend the least scarce one.

Finding: an order accepting ``A|B`` took the policy's best node across both models and,
on equal costs, node order — so it used up the scarce model that single-model orders
needed. Now, after the policy's lead tiers (allocation quality), the model with the
largest free share wins.
"""

import pytest

from scheduler import Placement, schedule_pass
from scheduler.cluster import ClusterState
from scheduler.context import score_context
from scheduler.nodestate import Shape
from scheduler.policy import get_policy
from scheduler.scarcity import free_shares, lead_tiers, model_order

from .builders import lease, node, req, snap


def _pool(busy_b: int, busy_a: int = 0, partial_b: int = 0):
    """4 B nodes first in node order, then 4 A nodes (8 GPUs each, flat cluster);
    ``busy_*`` whole nodes busy, ``partial_b`` GPUs busy on the last B node."""
    nodes = tuple(node(f"b{k}", "B") for k in range(4)) + tuple(
        node(f"a{k}", "A") for k in range(4))
    held = [lease(f"lb{k}", f"b{k}", list(range(8)), model="B") for k in range(busy_b)]
    held += [lease(f"la{k}", f"a{k}", list(range(8)), model="A") for k in range(busy_a)]
    if partial_b:
        held.append(lease("pb", "b3", list(range(partial_b)), model="B"))
    return snap(nodes, leases=tuple(held))


ANY_OF = frozenset({"A", "B"})


@pytest.mark.parametrize(("case", "pool", "order", "model"), [
    # B is scarce (1 of 4 nodes free): the A|B order takes A (old code: b3, node order)
    ("scarce B", _pool(busy_b=3), {"gpus": 1, "models": ANY_OF}, "A"),
    ("scarce B, whole node", _pool(busy_b=3), {"gpus": 8, "models": ANY_OF}, "A"),
    ("scarce B, fraction", _pool(busy_b=3), {"gpu_milli": 500, "models": ANY_OF}, "A"),
    ("scarce A", _pool(busy_b=0, busy_a=3), {"gpus": 1, "models": ANY_OF}, "B"),
    ("one model named", _pool(busy_b=3), {"gpus": 1, "models": frozenset({"B"})}, "B"),
    # equal free shares: node order as before (b0 first)
    ("equal shares", _pool(busy_b=0), {"gpus": 1, "models": ANY_OF}, "B"),
    # allocation quality first: filling b3's last GPU beats breaking an idle A node
    ("quality first", _pool(busy_b=3, partial_b=7), {"gpus": 1, "models": ANY_OF}, "B"),
    ("gang", _pool(busy_b=2), {"gpus": 8, "nodes": 2, "models": ANY_OF}, "A"),
])
def test_orders_naming_several_models_take_the_least_scarce(case, pool, order, model):
    d = schedule_pass(pool, [req("o", **order)], now=0).decisions[0]
    assert isinstance(d, Placement), (case, d)
    assert d.model == model, (case, d.nodes)
    assert {n[0] for n in d.nodes} == {model.lower()}


def test_free_shares_and_model_order():
    s = _pool(busy_b=3, partial_b=4)  # B: 4 of 32 GPUs free; A: all free
    state = ClusterState(s.nodes, get_policy(), score_context(s, []))
    for held in s.leases:
        for part in held.parts:
            state.consume(part)
    shares = free_shares(state, {"A", "B", "C"})
    assert shares == {"A": 1.0, "B": 4 / 32, "C": 0.0}
    assert model_order(shares) == ["A", "B", "C"]
    assert model_order({"X": 0.5, "W": 0.5}) == ["W", "X"]


def test_lead_tiers_stop_after_the_first_placement_tier():
    assert lead_tiers(get_policy("fgd+fabric")) == 3  # locality, fabric, fgd levels
    assert lead_tiers(get_policy("fgd+")) == 2  # locality, fgd levels


def test_free_shares_follow_placements_releases_and_readiness():
    s = _pool(busy_b=0)
    state = ClusterState(s.nodes, get_policy(), score_context(s, []))
    whole = Shape(frozenset({"B"}), 8, 1000, 0, 0)
    choice = state.best(whole)
    alloc = state.place(choice.node, whole, choice.option)
    assert free_shares(state, {"B"}) == {"B": 24 / 32}
    state.set_ready(3, False)
    assert free_shares(state, {"B"}) == {"B": 16 / 32}
    state.release(alloc)
    state.set_ready(3, True)
    assert free_shares(state, {"A", "B"}) == {"A": 1.0, "B": 1.0}


# Issue 30: the model that model-constrained demand presses is kept for that demand.
# b0 (B, 8 GPUs) comes first in node order, then four A nodes, all idle (equal free
# shares); A-only and B-only orders weigh the same in the snapshot's task mix, so FGD's levels tie between the models (each model's free
# GPUs are unusable for the other's orders alike), but B has a quarter of A's capacity.
def _pressed_b(first: dict[str, object]):
    from scheduler.model import TaskType

    nodes = (node("b0", "B"),) + tuple(node(f"a{k}", "A") for k in range(4))
    mix = (TaskType(1000, 1000, 1, frozenset(), 0.2),
           TaskType(1000, 1000, 1, frozenset({"A"}), 0.4),
           TaskType(1000, 1000, 1, frozenset({"B"}), 0.4))
    return snap(nodes, task_mix=mix), [req("o", **first)]


def _decision(s, queue, rid):
    """The pass's placement of request ``rid`` (the pass may reorder the queue)."""
    d = next(d for d in schedule_pass(s, queue, now=0).decisions if d.request_id == rid)
    assert isinstance(d, Placement), d
    return d


def test_model_pressure_is_constrained_demand_over_capacity_share():
    from scheduler.frag import model_pressure
    from scheduler.model import TaskType

    anyone = TaskType(1000, 1000, 1, frozenset(), 0.2)
    only_a = TaskType(1000, 1000, 1, frozenset({"A"}), 0.4)
    only_b = TaskType(1000, 1000, 1, frozenset({"B"}), 0.4)
    both = TaskType(1000, 500, 1, frozenset({"A", "B"}), 0.4)
    cap = {"A": 32, "B": 8}
    got = model_pressure((anyone, only_a, only_b), cap)
    assert got == pytest.approx({"A": 0.4 / 0.8, "B": 0.4 / 0.2})
    assert model_pressure((anyone,), cap) == {"A": 0.0, "B": 0.0}  # nobody names one
    # an A|B type presses both models alike, by the capacity share of the two together
    assert model_pressure((anyone, both), cap) == pytest.approx(
        {"A": (0.2 / 0.4) / 1.0, "B": (0.2 / 0.4) / 1.0})


def test_an_any_model_order_does_not_spend_the_pressed_model():
    s, queue = _pressed_b({"gpus": 1})
    d = _decision(s, queue, "o")
    assert d.model == "A", d.nodes  # old code: b0, FGD's tie broken by node order


def test_an_order_naming_several_models_takes_the_unpressed_one():
    s, queue = _pressed_b({"gpus": 1, "models": ANY_OF})
    d = _decision(s, queue, "o")
    assert d.model == "A", d.nodes  # old code: b0 (FGD's levels first, then node order)


def test_a_cpu_only_order_is_not_steered_by_model_pressure():
    from scheduler.scores import model_scarcity

    s, queue = _pressed_b({"gpus": 1})
    ctx = score_context(s, queue)
    key = ClusterState(s.nodes, get_policy(), ctx).keys[0]  # b0, the pressed model
    cpu_only = Shape(frozenset(), 0, 0, 1000, 1024)
    one_gpu = Shape(frozenset(), 1, 1000, 1000, 1024)
    assert model_scarcity(ctx, key, cpu_only, (), key) == 0.0
    assert model_scarcity(ctx, key, one_gpu, (), key) > 1.0
