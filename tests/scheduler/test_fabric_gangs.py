"""Leaves kept and drained for the gangs that need one (issue 11, gang wait): named
topologies (``hgx_cluster``: leaves of 4 HGX nodes), ``fgd+fabric`` against ``fgd+``."""

from scheduler import Lease, Locality, LocalityLevel, NodeAllocation, PriorityClass, schedule_pass
from scheduler.fabric import IN_FABRIC, KEEP, WHOLE, break_cost, drain_leaves

from .builders import hgx_cluster, lease, req, snap

LEAF = Locality(LocalityLevel.LEAF, required=True)
ALL = list(range(8))


def leaf_gang_lease(lid: str, leaf: int, end: int) -> Lease:
    parts = tuple(NodeAllocation(f"n{leaf:02d}{k:02d}", tuple((g, 1000) for g in ALL), 0, 0)
                  for k in range(4))
    return Lease(lid, "t1", PriorityClass.ON_DEMAND, parts, 0, end)


def one_busy_node_per_leaf(ends: dict[int, int]) -> tuple[Lease, ...]:
    return tuple(lease(f"b{leaf}", f"n{leaf:02d}00", [0], end=end)
                 for leaf, end in ends.items())


def test_two_waiting_leaf_gangs_drain_two_leaves():
    # Leaves 0/1/2 each have one busy node (free at 100 / 200 / 900): neither 4-node
    # gang fits. Before, only leaf 0 was drained and the 8-GPU order broke leaf 1
    # (node order); now leaf 1 is drained for the second gang, the order goes to leaf 2.
    nodes, topo = hgx_cluster(leaves=3, per_leaf=4)
    s = snap(nodes, topo, leases=one_busy_node_per_leaf({0: 100, 1: 200, 2: 900}))
    queue = [req("g1", gpus=8, nodes=4, locality=LEAF),
             req("g2", gpus=8, nodes=4, locality=LEAF, submitted_at=1),
             req("one", gpus=8, submitted_at=2)]
    by_id = schedule_pass(s, queue, now=0).by_id()
    assert by_id["g1"].reason.value == "topology" and by_id["g2"].reason.value == "topology"
    assert by_id["one"].nodes[0].startswith("n02"), by_id["one"]


def test_leaves_are_drained_for_the_largest_leaf_gang_seen_before_it_waits():
    # A 4-node leaf gang runs on leaf 2; leaves 0/1/3 have one busy node (free at 100 /
    # 500 / 2000): no leaf could host the next such gang. The two leaves that free
    # soonest (0, 1) are drained ahead of it, so an 8-GPU order goes to leaf 3; before,
    # node order sent it to leaf 0.
    nodes, topo = hgx_cluster(leaves=4, per_leaf=4)
    busy = (*one_busy_node_per_leaf({0: 100, 1: 500, 3: 2000}), leaf_gang_lease("g", 2, 900))
    s = snap(nodes, topo, leases=busy)
    d = schedule_pass(s, [req("one", gpus=8)], now=0).decisions[0]
    assert d.nodes[0].startswith("n03"), d
    old = schedule_pass(s, [req("one", gpus=8)], now=0, policy="fgd+").decisions[0]
    assert old.nodes[0].startswith("n00")  # fgd+ is unchanged


def test_a_gang_spilling_over_leaves_takes_the_fullest_leaves_first():
    # No leaf holds 5 nodes. Leaf 0 is wholly free, leaves 1 and 2 have 2 and 3 idle:
    # a 5-node gang that does not require one leaf used to take leaf 0 and one more;
    # the default now takes leaves 1 and 2 and keeps leaf 0 whole.
    nodes, topo = hgx_cluster(leaves=3, per_leaf=4)
    busy = (lease("a", "n0100", ALL), lease("b", "n0101", ALL), lease("c", "n0200", ALL))
    s = snap(nodes, topo, leases=busy)
    gang = req("g", gpus=8, nodes=5)
    d = schedule_pass(s, [gang], now=0).decisions[0]
    assert {n[:3] for n in d.nodes} == {"n01", "n02"}, d
    old = schedule_pass(s, [gang], now=0, policy="fgd+").decisions[0]
    assert {n[:3] for n in old.nodes} == {"n00", "n02"}


def test_drain_leaves_table():
    leaf_of = {"a1": "A", "a2": "A", "b1": "B", "b2": "B", "c1": "C", "c2": "C"}
    free = {"a1": 900.0, "a2": 100.0, "b1": 500.0, "b2": 400.0, "c1": 50.0}
    assert drain_leaves(leaf_of, free, [2, 2]) == [(2, "C"), (2, "B")]
    assert drain_leaves(leaf_of, free, [2], idle={"C": 2}) == []  # C hosts it now
    assert drain_leaves(leaf_of, free, [2, 2, 2, 2]) == [(2, "C"), (2, "B"), (2, "A")]
    assert drain_leaves(leaf_of, free, [3]) == []


def test_breaking_a_kept_leaf_costs_more_than_the_drain():
    assert break_cost(IN_FABRIC | WHOLE | KEEP, True, 0) == 51.0
    assert break_cost(IN_FABRIC | KEEP, False, 0) == 0.0  # a partly used node: no break
