"""Fabric-aware placement (issue 11 finding 1): small orders keep free leaves whole."""

from dataclasses import replace

import pytest

from scheduler import Locality, LocalityLevel, Placement, Snapshot, schedule_pass
from scheduler.fabric import (
    EDGE,
    IDLE_SHIFT,
    IDLE_STEPS,
    IN_FABRIC,
    LAST,
    WHOLE,
    FabricModel,
    LeafTracker,
    break_cost,
    drain_leaf,
)

from .builders import as_lease, busy_leaves, hgx_cluster, lease, node, req, snap

LEAF = Locality(LocalityLevel.LEAF, required=True)
SMALL_ORDERS = (("quarter", {"gpu_milli": 250}), ("one", {"gpus": 1}),
                ("four", {"gpus": 4}), ("eight", {"gpus": 8}))


def place_in_turn(s: Snapshot, orders, policy=None) -> tuple[Snapshot, list[Placement]]:
    """Each order in its own pass (as the portal does), its lease written back."""
    placed = []
    for rid, kw in orders:
        d = schedule_pass(s, [req(rid, **kw)], now=0, policy=policy).decisions[0]
        assert isinstance(d, Placement), d
        placed.append(d)
        s = replace(s, leases=(*s.leases, as_lease(d)))
    return s, placed


def test_small_orders_keep_free_leaves_whole():
    s, topo = busy_leaves()
    _, placed = place_in_turn(s, SMALL_ORDERS)
    for d in placed:
        assert {topo.parent[n] for n in d.nodes} != {"leaf0"}, d


def test_eight_by_eight_leaf_gang_is_placed_after_the_small_orders():
    s, topo = busy_leaves()
    s, _ = place_in_turn(s, SMALL_ORDERS)
    gang = req("gang", gpus=8, nodes=8, locality=LEAF)
    d = schedule_pass(s, [gang], now=0).decisions[0]
    assert isinstance(d, Placement), d
    assert {topo.parent[n] for n in d.nodes} == {"leaf0"}


def test_small_orders_share_partly_used_nodes_before_opening_fresh_ones():
    s, topo = busy_leaves(busy_gpus=4)  # the busy nodes have 4 GPUs idle
    _, placed = place_in_turn(s, SMALL_ORDERS[:3])
    for d in placed:
        assert d.nodes[0].endswith("00") and d.nodes[0] != "n0000", d


def test_fractional_prefers_partly_used_node():
    # FGD alone opens a fresh node here (the 4 idle GPUs left would no longer fit the
    # 4-GPU task of the mix); the fabric tier keeps fresh nodes whole.
    nodes, topo = hgx_cluster(leaves=2, per_leaf=4)
    s = snap(nodes, topo, leases=(lease("l", "n0103", [0, 1, 2, 3]),))
    d = schedule_pass(s, [req("f", gpu_milli=300)], now=0).decisions[0]
    assert isinstance(d, Placement)
    assert d.nodes == ("n0103",)


def test_fractional_prefers_partly_used_gpu_on_the_partly_used_node():
    nodes, topo = hgx_cluster(leaves=2, per_leaf=4)
    s = snap(nodes, topo, leases=(lease("l", "n0102", [5], milli=500),))
    d = schedule_pass(s, [req("f", gpu_milli=500)], now=0).decisions[0]
    assert isinstance(d, Placement)
    assert d.gpu_ids == (("n0102", 5),)


def test_breaking_the_last_gang_capable_leaf_costs_most():
    # Leaf 0 of 4 nodes holds the typical 4-node gang; leaf 1 cannot (one node busy).
    nodes, topo = hgx_cluster(leaves=2, per_leaf=4)
    s = snap(nodes, topo, leases=(lease("g", "n0100", [0]), lease("h", "n0101", [0])))
    queue = [req("single", gpus=8), req("gang", gpus=8, nodes=4, locality=LEAF,
                                        submitted_at=1)]
    by_id = schedule_pass(s, queue, now=0).by_id()
    assert by_id["single"].nodes[0].startswith("n01"), by_id["single"]
    assert isinstance(by_id["gang"], Placement)


def test_flat_cluster_scores_zero():
    s = snap((node("a"), node("b")))
    d = schedule_pass(s, [req("r", gpus=2)], now=0).decisions[0]
    assert d.score["fabric"] == 0


@pytest.mark.parametrize(("flags", "broken", "domains", "cost"), [
    (0, True, 1, 0.0),
    (IN_FABRIC, False, 0, 0.0),
    (IN_FABRIC, False, 1, 0.25),
    (IN_FABRIC, True, 1, 1.25),
    (IN_FABRIC | WHOLE, True, 1, 3.25),
    (IN_FABRIC | EDGE, True, 1, 5.25),
    (IN_FABRIC | EDGE | LAST, True, 1, 13.25),
    (IN_FABRIC | WHOLE | EDGE | LAST, True, 1, 15.25),
])
def test_break_cost_table(flags, broken, domains, cost):
    assert break_cost(flags, broken, domains) == cost


def test_leaf_tracker_flags_follow_idle_counts():
    names = ["a0", "a1", "b0", "b1"]
    model = FabricModel({"a0": "A", "a1": "A", "b0": "B", "b1": "B"}, gang_nodes=2)
    t = LeafTracker(model, names)
    for i in range(4):
        t.set_node(i, True, True)
    t.recompute()
    low = (1 << IDLE_SHIFT) - 1
    assert t.flag(0) & low == IN_FABRIC | WHOLE | EDGE
    assert t.flag(0) >> IDLE_SHIFT == IDLE_STEPS  # all idle
    t.update(2, True, False)  # leaf B drops below the gang: A is the last capable leaf
    assert t.flag(0) & low == IN_FABRIC | WHOLE | EDGE | LAST
    assert t.flag(2) & low == IN_FABRIC
    assert t.flag(2) >> IDLE_SHIFT == IDLE_STEPS // 2


def test_idle_nodes_are_broken_in_the_leaf_with_fewest_idle():
    # leaf0: 1 busy node (3 idle); leaf1: 2 busy nodes (2 idle): an 8-GPU order goes to
    # leaf1, so that free nodes gather in leaf0.
    nodes, topo = hgx_cluster(leaves=2, per_leaf=4)
    busy = (lease("a", "n0000", list(range(8))), lease("b", "n0100", list(range(8))),
            lease("c", "n0101", list(range(8))))
    d = schedule_pass(snap(nodes, topo, leases=busy), [req("r", gpus=8)], now=0).decisions[0]
    assert d.nodes[0].startswith("n01"), d


def _drain_case():
    nodes, topo = hgx_cluster(leaves=2, per_leaf=4)
    busy = (lease("a", "n0000", [0], end=100), lease("b", "n0001", [0], end=100),
            lease("c", "n0100", [0], end=500), lease("d", "n0101", [0], end=500))
    return snap(nodes, topo, leases=busy)


def test_a_waiting_leaf_gang_drains_the_leaf_that_frees_soonest():
    s = _drain_case()
    gang = req("g", gpus=8, nodes=4, locality=LEAF)
    single = req("one", gpus=8, submitted_at=1)
    alone = schedule_pass(s, [single], now=0).decisions[0]
    assert alone.nodes[0].startswith("n00")  # leaves alike: node order
    by_id = schedule_pass(s, [gang, single], now=0).by_id()
    assert by_id["g"].reason.value == "topology" and by_id["g"].earliest_start == 100
    assert by_id["one"].nodes[0].startswith("n01"), by_id["one"]  # leaf0 is kept


def test_drain_leaf_picks_the_earliest_leaf_by_the_calendar():
    leaf_of = {"a1": "A", "a2": "A", "b1": "B", "b2": "B"}
    free = {"a1": 900.0, "a2": 100.0, "b1": 500.0, "b2": 400.0}
    assert drain_leaf(leaf_of, free, 2) == "B"
    assert drain_leaf(leaf_of, free, 1) == "A"
    assert drain_leaf(leaf_of, free, 3) is None
    assert drain_leaf(leaf_of, free, None) is None


def test_a_smaller_gang_keeps_off_the_leaf_drained_for_a_larger_one():
    # 3 leaves of 4. leaf0 has 2 idle nodes and frees all 4 soonest: it is drained for
    # the 4-node gang. A 2-node gang alone goes to leaf0 (best fit: the fullest leaf that
    # holds it); with the big gang waiting it goes elsewhere.
    nodes, topo = hgx_cluster(leaves=3, per_leaf=4)
    busy = (lease("a", "n0000", [0], end=100), lease("b", "n0001", [0], end=100),
            lease("c", "n0100", [0], end=500), lease("d", "n0200", [0], end=900))
    s = snap(nodes, topo, leases=busy)
    small = req("small", gpus=8, nodes=2, submitted_at=1)
    assert {n[:3] for n in schedule_pass(s, [small], now=0).decisions[0].nodes} == {"n00"}
    big = req("big", gpus=8, nodes=4, locality=LEAF)
    by_id = schedule_pass(s, [big, small], now=0).by_id()
    assert by_id["big"].reason.value == "topology" and by_id["big"].earliest_start == 100
    assert {n[:3] for n in by_id["small"].nodes} == {"n01"}, by_id["small"]
