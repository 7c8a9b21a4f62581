"""The topology as a switch graph (issue 11 finding 6): every uplink, any depth, rails."""

import pytest

from scheduler import Locality, LocalityLevel, Placement, Topology, schedule_pass
from scheduler.fabrics import fat_tree_2tier, fat_tree_3tier, superpod

from .builders import lease, req, snap

LEAF = Locality(LocalityLevel.LEAF, required=True)


def one_hop(level: int = 1) -> Locality:
    return Locality(LocalityLevel.SPINE, required=True, max_hops=level)


def test_multi_spine_hops():
    # leaf0 is cabled to spine0 and spine1, leaf1 only to spine1. The tree model hung
    # every leaf under one parent (leaf0 -> spine0, the lowest GUID), so nodes of leaf0
    # and leaf1 looked two levels apart; on the graph they are one spine apart.
    nodes, _ = fat_tree_2tier(leaves=2, per_leaf=2, spines=2)
    topo = Topology(parent={n.name: f"leaf{n.name[1:3]}" for n in nodes},
                    links=(("leaf00", "spine00"), ("leaf00", "spine01"), ("leaf01", "spine01")))
    assert topo.hops("l00n00", "l00n01") == 0
    assert topo.hops("l00n00", "l01n00") == 1
    gang = schedule_pass(snap(nodes, topo), [
        _req("g", nodes=4, locality=one_hop())], now=0).decisions[0]
    assert isinstance(gang, Placement) and gang.score["hops"] == 1


def test_three_tier_distance():
    nodes, topo = fat_tree_3tier(pods=2, leaves_per_pod=2, per_leaf=2, aggs_per_pod=2)
    assert topo.hops("p0l00n00", "p0l00n01") == 0  # same leaf
    assert topo.hops("p0l00n00", "p0l01n00") == 1  # same pod: leaf-agg-leaf
    assert topo.hops("p0l00n00", "p1l00n00") == 2  # leaf-agg-core-agg-leaf
    assert topo.graph().depth == 2


def test_three_tier_gang_stays_in_one_pod_when_it_can():
    nodes, topo = fat_tree_3tier(pods=2, leaves_per_pod=2, per_leaf=2)
    busy = (lease("b", "p0l00n00", [0]),)  # pod 0 has 3 free nodes, pod 1 has 4
    d = schedule_pass(snap(nodes, topo, leases=busy), [_req("g", nodes=4)], now=0).decisions[0]
    assert isinstance(d, Placement)
    assert {n[:2] for n in d.nodes} == {"p1"} and d.score["hops"] == 1


def test_three_tier_required_one_level_is_refused_across_pods():
    nodes, topo = fat_tree_3tier(pods=2, leaves_per_pod=2, per_leaf=2)
    busy = (lease("b0", "p0l00n00", [0]), lease("b1", "p1l00n00", [0]))
    d = schedule_pass(snap(nodes, topo, leases=busy), [_req("g", nodes=4, locality=one_hop())],
                      now=0).decisions[0]
    assert d.reason.value == "topology"


def test_superpod_unit_is_one_rail_group():
    nodes, topo = superpod(units=2, nodes_per_unit=32, rails=8)
    assert len(nodes) == 64 and len(topo.attach["su0n00"]) == 8
    assert topo.leaf_of("su0n00") == topo.leaf_of("su0n31") != topo.leaf_of("su1n00")
    assert topo.hops("su0n00", "su0n31") == 0
    assert topo.hops("su0n00", "su1n00") == 1  # rail leaf - rail spine - rail leaf


def test_leaf_gang_of_a_whole_superpod_unit():
    nodes, topo = superpod(units=2, nodes_per_unit=32, rails=8)
    busy = (lease("b", "su0n00", [0]),)
    d = schedule_pass(snap(nodes, topo, leases=busy), [_req("g", nodes=32, locality=LEAF)],
                      now=0).decisions[0]
    assert isinstance(d, Placement)
    assert {n[:3] for n in d.nodes} == {"su1"} and d.score["hops"] == 0


@pytest.mark.parametrize(("a", "b", "hops"), [("n1", "n2", 0), ("n1", "n3", 1),
                                               ("n1", "n4", 2), ("n1", "x", 3)])
def test_tree_form_hops(a, b, hops):
    topo = Topology({"n1": "l1", "n2": "l1", "n3": "l2", "n4": "l3", "l1": "s1", "l2": "s1",
                     "l3": "s2", "s1": "c", "s2": "c"})
    assert topo.hops(a, b) == hops  # a node outside the tree meets the others at the root


def _req(rid, **kw):
    return req(rid, gpus=8, **kw)


def test_a_replaced_topology_builds_its_own_graph():
    from dataclasses import replace

    t = Topology(parent={"a": "l1", "b": "l2"}, links=(("l1", "s"), ("l2", "s")))
    assert t.hops("a", "b") == 1
    cut = replace(t, links=(("l1", "s"),))
    assert cut.hops("a", "b") is None and t.hops("a", "b") == 1
