"""Issue 11: gangs that need a whole leaf wait less — EASY backfill reservation.

Finding: a waiting leaf-required gang was passed by smaller jobs that re-filled the leaf
it needed (the drain was only a cost), so its wait had no bound. Now the head-of-line
leaf gang holds the nodes of the leaf that frees soonest; later work uses them only if
it ends by the gang's reserved start.
"""

from dataclasses import replace

import pytest

from scheduler import (
    Locality,
    LocalityLevel,
    Placement,
    PriorityClass,
    TenantQuota,
    Unplaceable,
    schedule_pass,
)
from scheduler.decisions import Reason
from scheduler.reservation import Hold, plan_hold

from .builders import hgx_cluster, lease, req, snap, waiting_gang_case

# The hold is opt-in (scheduler/policy.py): off in the default policy, measured.
HOLD_POLICY = "fgd+fabric+hold"

LEAF = Locality(LocalityLevel.LEAF, required=True)


GANG = req("gang", gpus=8, nodes=4, locality=LEAF, start=0, end=10_000)


def test_waiting_leaf_gang_is_not_passed_by_a_longer_smaller_gang():
    # Old code: the 2-node gang found only one idle node off the drained leaf, fell back
    # to leaf0 and took it until t=10,000 — the 4-node gang's start moved from 100 to
    # 10,000. Now it is refused as reserved and the gang keeps its start.
    s = waiting_gang_case()
    pair = req("pair", gpus=8, nodes=2, start=0, end=10_000, submitted_at=1)
    by_id = schedule_pass(s, [GANG, pair], now=0, policy=HOLD_POLICY).by_id()
    assert isinstance(by_id["gang"], Unplaceable)
    assert by_id["gang"].earliest_start == 100
    refused = by_id["pair"]
    assert isinstance(refused, Unplaceable), refused
    assert refused.reason == Reason.RESERVED
    assert "gang" in refused.detail and "t=100" in refused.detail


def test_work_that_ends_before_the_gang_starts_backfills_the_held_leaf():
    s = waiting_gang_case()
    short = req("short", gpus=8, nodes=2, start=0, end=100, submitted_at=1)
    d = schedule_pass(s, [GANG, short], now=0, policy=HOLD_POLICY).by_id()["short"]
    assert isinstance(d, Placement), d
    assert set(d.nodes) == {"n0000", "n0001"}


def test_single_node_work_off_the_held_nodes_is_unaffected_and_on_them_is_refused():
    s = waiting_gang_case()
    first = req("first", gpus=8, start=0, end=10_000, submitted_at=1)
    second = req("second", gpus=8, start=0, end=10_000, submitted_at=2)
    open_ended = req("open", gpus=1, start=0, end=None, submitted_at=3)
    by_id = schedule_pass(s, [GANG, first, second, open_ended], now=0, policy=HOLD_POLICY).by_id()
    assert by_id["first"].nodes == ("n0103",)  # the one idle node outside the hold
    assert by_id["second"].reason == Reason.RESERVED
    assert by_id["open"].reason == Reason.RESERVED  # open-ended never backfills


def test_a_gang_as_large_as_the_waiting_one_may_take_the_held_leaf():
    s = waiting_gang_case()
    twin = req("twin", gpus=8, nodes=4, locality=LEAF, start=0, end=10_000,
               submitted_at=1)
    by_id = schedule_pass(s, [GANG, twin], now=0, policy=HOLD_POLICY).by_id()
    # Neither fits now (3 idle nodes); the twin is refused for room, not by the hold.
    assert by_id["twin"].reason == Reason.INSUFFICIENT_CAPACITY


def test_fgd_plus_keeps_no_reservation():
    s = waiting_gang_case()
    pair = req("pair", gpus=8, nodes=2, start=0, end=10_000, submitted_at=1)
    d = schedule_pass(s, [GANG, pair], now=0, policy="fgd+").by_id()["pair"]
    assert isinstance(d, Placement)


def test_a_gang_refused_by_quota_holds_nothing():
    s = waiting_gang_case()
    s = replace(s, quotas={"t1": TenantQuota("t1", gpu_hour_budget=1.0)})
    pair = req("pair", tenant="t2", gpus=8, nodes=2, start=0, end=10_000, submitted_at=1)
    by_id = schedule_pass(s, [GANG, pair], now=0, policy=HOLD_POLICY).by_id()
    assert by_id["gang"].reason == Reason.BUDGET
    assert isinstance(by_id["pair"], Placement)


LEAVES = {"a1": "A", "a2": "A", "a3": "A", "b1": "B", "b2": "B"}


@pytest.mark.parametrize(("need", "free_at", "now", "expected"), [
    # the leaf whose need-th node frees soonest; its need earliest nodes
    (2, {"a1": 900, "a2": 100, "a3": 50, "b1": 500, "b2": 400}, 0,
     Hold("g", "A", frozenset({"a2", "a3"}), 100)),
    (2, {"a1": 900, "a2": 800, "a3": 700, "b1": 500, "b2": 400}, 0,
     Hold("g", "B", frozenset({"b1", "b2"}), 500)),
    # only leaf A has 3 nodes
    (3, {"a1": 900}, 0, Hold("g", "A", frozenset({"a1", "a2", "a3"}), 900)),
    # free now: the start is now; ties between leaves to the lowest name
    (2, {}, 7, Hold("g", "A", frozenset({"a1", "a2"}), 7)),
    # open-ended leases never free
    (2, {"a1": float("inf"), "a2": float("inf"), "a3": float("inf"),
         "b1": float("inf")}, 0, None),
    (4, {}, 0, None),
    (0, {}, 0, None),
    # fractional ends round up (the gang never starts before the lease ends)
    (1, {"a1": 10.5, "a2": 11, "a3": 12, "b1": 20, "b2": 30}, 0,
     Hold("g", "A", frozenset({"a1"}), 11)),
])
def test_plan_hold_table(need, free_at, now, expected):
    assert plan_hold("g", need, LEAVES, free_at, now) == expected


HOLD = Hold("g", "A", frozenset({"a1", "a2"}), 100)


@pytest.mark.parametrize(("rid", "end", "nodes", "admitted"), [
    ("g", None, 2, True),  # the gang itself
    ("x", 100, 1, True),  # ends at the gang's start
    ("x", 101, 1, False),  # would delay it
    ("x", None, 1, False),  # open-ended
    ("x", 10_000, 2, True),  # a gang as large takes the leaf it waits for
    ("x", 10_000, 3, True),
])
def test_hold_admits_table(rid, end, nodes, admitted):
    assert HOLD.admits(rid, end, nodes) is admitted


def test_preemption_does_not_take_the_held_nodes_either():
    # leaf0: 2 idle, n0002 on-demand and n0003 spot until 100; leaf1 busy until 900.
    # An on-demand order may preempt spot — but not on the nodes held for the gang.
    nodes, topo = hgx_cluster(leaves=2, per_leaf=4)
    busy = (lease("a", "n0002", list(range(8)), end=100),
            lease("spot", "n0003", list(range(8)), end=100, priority=PriorityClass.SPOT),
            *(lease(f"c{k}", f"n010{k}", list(range(8)), end=900) for k in range(4)))
    s = snap(nodes, topo, leases=busy)
    od = req("od", gpus=8, start=0, end=10_000, submitted_at=1)
    alone = schedule_pass(s, [od], now=0, policy=HOLD_POLICY).decisions[0]
    assert isinstance(alone, Placement)  # without the gang it takes an idle node
    d = schedule_pass(s, [GANG, od], now=0, policy=HOLD_POLICY).by_id()["od"]
    assert isinstance(d, Unplaceable) and d.reason == Reason.RESERVED, d
    assert d.victims == ()


def test_a_preemption_refused_by_the_hold_leaves_its_victims_running():
    """Regression (found by the fabric benchmark's spot runs, ADR 0176): the pass released
    the victims of a preemption in its working state and *then* refused the placement
    because the chosen node was held; the victims' GPUs stayed free in the pass, so a
    later request took them while the spot lease still ran there (double-booked)."""
    spot = lease("spot", "n0000", list(range(8)), end=100, priority=PriorityClass.SPOT)
    also_busy = lease("d", "n0001", list(range(8)), end=100)
    s = waiting_gang_case((spot, also_busy))
    x = req("x", gpus=8, start=0, end=10_000, submitted_at=1)  # takes n0103, off the hold
    y = req("y", gpus=8, start=0, end=10_000, submitted_at=2)  # only by preempting n0000
    z = req("z", gpus=8, start=0, end=50, submitted_at=3)  # ends by t=100: may backfill
    by_id = schedule_pass(s, [GANG, x, y, z], now=0, policy=HOLD_POLICY).by_id()
    assert by_id["x"].nodes == ("n0103",)
    # Refused: n0103 went to x, and preempting on n0000 would delay the held gang.
    assert isinstance(by_id["y"], Unplaceable) and by_id["y"].reason == Reason.PRIORITY
    placed = by_id["z"]
    assert isinstance(placed, Placement), placed
    # On n0000 only by preempting the spot lease, never beside it.
    assert placed.nodes == ("n0000",) and placed.victims == ("spot",)
