"""Why gangs wait (scheduler.bench.gangwait): the classification the fabric bench prints."""

import pytest

from scheduler.bench.gangwait import NEVER, Moment, WaitCauses

# Two leaves of 4 nodes. ``first``: arrival rank of each node's earliest running job.
LEAF_OF = {f"{leaf}{k}": leaf for leaf in "AB" for k in range(4)}


def moment(first, free_gpus, running):
    return Moment.build(dict(zip(sorted(LEAF_OF), first)), LEAF_OF, free_gpus, running)


@pytest.mark.parametrize(("first", "free", "running", "need", "leaf", "bucket"), [
    # leaf A: 2 idle, 2 nodes taken by jobs that arrived after the gang (rank 5 > 3)
    ((NEVER, NEVER, 5, 5, 0, 0, 0, 0), 16, [(5, 16), (0, 32)], 4, True, "overtaken"),
    # every node busy with earlier jobs, 1 GPU free: capacity
    ((0, 0, 0, 0, 1, 1, 1, 1), 1, [(0, 31), (1, 32)], 2, True, "capacity"),
    # 2 idle in each leaf: 4 whole nodes free, no leaf holds 4
    ((NEVER, NEVER, 0, 0, NEVER, NEVER, 1, 1), 32, [(0, 16), (1, 16)], 4, True,
     "leaf_frag"),
    # the same nodes for a gang that does not require one leaf: it would fit
    ((NEVER, NEVER, 0, 0, NEVER, NEVER, 1, 1), 32, [(0, 16), (1, 16)], 4, False,
     "overtaken"),
    # 8 free GPUs on busy nodes (1 each), no idle node
    ((0, 0, 0, 0, 1, 1, 1, 1), 8, [(0, 28), (1, 28)], 1, False, "node_frag"),
])
def test_classify_table(first, free, running, need, leaf, bucket):
    assert moment(first, free, running).classify(3, need, 8, leaf) == bucket


def test_wait_causes_shares_over_all_and_over_the_tail():
    c = WaitCauses()
    c.add("g1", "leaf_frag", 300.0)
    c.add("g2", "capacity", 100.0)
    assert c.shares() == {"capacity": 25.0, "overtaken": 0.0, "leaf_frag": 75.0,
                          "node_frag": 0.0}
    assert c.shares(["g2"])["capacity"] == 100.0
    assert WaitCauses().shares()["capacity"] == 0.0


def test_points_by_size_say_which_gangs_the_leaf_frag_share_comes_from():
    c = WaitCauses()
    c.add("big", "leaf_frag", 300.0)
    c.add("small", "leaf_frag", 100.0)
    c.add("small", "capacity", 100.0)
    c.add("unsized", "leaf_frag", 500.0)  # not in the map (a requeued spot copy): left out
    points = c.points_by("leaf_frag", {"big": 16, "small": 2})
    assert points == {2: 10.0, 16: 30.0}
    assert list(points) == [2, 16]
    assert c.points_by("capacity", {"big": 16, "small": 2}) == {2: 10.0}
    assert WaitCauses().points_by("leaf_frag", {"big": 16}) == {}
