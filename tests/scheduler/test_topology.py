"""Table tests for topology-aware placement (named topologies as fixtures)."""

from scheduler import Locality, LocalityLevel, Placement, Topology, schedule_pass

from .builders import hgx_cluster, lease, node, req, snap


def place(s, r):
    d = schedule_pass(s, [r], now=0).decisions[0]
    assert isinstance(d, Placement), d
    return d


def test_8_gpu_request_lands_on_one_nvlink_domain():
    # PCIe-ish box with two 4-GPU domains, and an HGX with one 8-GPU domain.
    nodes = (node("pcie", gpus=8, domains=2), node("hgx", gpus=8, domains=1))
    d = place(snap(nodes), req("r", gpus=8))
    assert d.nodes == ("hgx",)
    assert d.score["locality"] == 0


def test_4_gpu_request_prefers_a_free_domain_over_spanning_two():
    n = node("pcie", gpus=8, domains=2)
    busy = lease("l", "pcie", [0, 4])  # one GPU used in each domain
    s = snap((n, node("other", gpus=8, domains=2)), leases=(busy,))
    d = place(s, req("r", gpus=4))
    assert d.nodes == ("other",)
    assert {g for _, g in d.gpu_ids} in ({0, 1, 2, 3}, {4, 5, 6, 7})


def test_required_nvlink_is_refused_when_it_would_span_domains():
    n = node("pcie", gpus=8, domains=2)
    s = snap((n,), leases=(lease("l", "pcie", [0, 4]),))
    loc = Locality(LocalityLevel.NVLINK, required=True)
    d = schedule_pass(s, [req("r", gpus=4, locality=loc)], now=0).decisions[0]
    assert d.reason.value == "topology"


def test_32_gpu_gang_lands_under_one_leaf_when_possible():
    nodes, topo = hgx_cluster(leaves=3, per_leaf=4)
    # leaf0 has one busy node: only leaves 1 and 2 hold 4 free nodes
    s = snap(nodes, topo, leases=(lease("l", "n0000", [0]),))
    d = place(s, req("g", gpus=8, nodes=4))
    leaves = {topo.parent[n] for n in d.nodes}
    assert len(leaves) == 1
    assert leaves != {"leaf0"}
    assert d.score["hops"] == 0


def test_gang_spans_the_fewest_spine_hops_when_no_leaf_holds_it():
    # 4 leaves of 2 nodes; leaves 0,1 under spine0, leaves 2,3 under spine1
    nodes, _ = hgx_cluster(leaves=4, per_leaf=2)
    parent = {n.name: f"leaf{int(n.name[1:3])}" for n in nodes}
    parent |= {"leaf0": "spine0", "leaf1": "spine0", "leaf2": "spine1", "leaf3": "spine1",
               "spine0": "core", "spine1": "core"}
    topo = Topology(parent)
    busy = lease("l", "n0000", [0])  # spine0 has only 3 free nodes now
    d = place(snap(nodes, topo, leases=(busy,)), req("g", gpus=8, nodes=4))
    assert {topo.parent[topo.parent[n]] for n in d.nodes} == {"spine1"}
    assert d.score["hops"] == 1


def test_required_leaf_locality_fails_with_reason_topology():
    nodes, topo = hgx_cluster(leaves=2, per_leaf=2)
    loc = Locality(LocalityLevel.LEAF, required=True)
    d = schedule_pass(snap(nodes, topo), [req("g", gpus=8, nodes=3, locality=loc)],
                      now=0).decisions[0]
    assert d.reason.value == "topology"


def test_fractional_request_packs_onto_a_partly_used_gpu_of_the_right_model():
    nodes = (node("a", model="A100", gpus=2), node("t", model="T4", gpus=2))
    used = (lease("l1", "t", [1], milli=500, model="T4"),
            lease("l2", "a", [0], milli=200, model="A100"))
    s = snap(nodes, leases=used)
    d = place(s, req("f", gpu_milli=500, models=frozenset({"T4"})))
    assert d.gpu_ids == (("t", 1),)
    assert d.parts[0].gpus == ((1, 500),)


def test_fractional_request_prefers_a_partly_used_node():
    nodes = (node("idle", model="T4", gpus=2), node("used", model="T4", gpus=2))
    s = snap(nodes, leases=(lease("l", "used", [0], milli=1000, model="T4"),))
    d = place(s, req("f", gpu_milli=300))
    assert d.nodes == ("used",)


def test_topology_blocked_gang_gets_earliest_start():
    # One busy node on each leaf: 6 free nodes, but no leaf holds the 4-node gang until
    # leaf1's lease ends at 100 (leaf0's ends at 200).
    nodes, topo = hgx_cluster(leaves=2, per_leaf=4)
    busy = (lease("l0", "n0000", [0], end=200), lease("l1", "n0100", [0], end=100))
    loc = Locality(LocalityLevel.LEAF, required=True)
    g = req("g", gpus=8, nodes=4, locality=loc, end=50)
    d = schedule_pass(snap(nodes, topo, leases=busy), [g], now=0).decisions[0]
    assert d.reason.value == "topology"
    assert d.earliest_start == 100


def test_never_placeable_topology_gang_has_no_earliest_start():
    nodes, topo = hgx_cluster(leaves=2, per_leaf=2)
    loc = Locality(LocalityLevel.LEAF, required=True)
    d = schedule_pass(snap(nodes, topo), [req("g", gpus=8, nodes=3, locality=loc)],
                      now=0).decisions[0]
    assert d.reason.value == "topology" and d.earliest_start is None
