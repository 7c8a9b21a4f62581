"""Issue 11 / ADR 0155: the gang reserve with time-bounded backfill.

A waiting leaf-required gang owns the leaf whose nodes are free soonest by the calendar;
until its reservation start only work that *ends* by then may land there (backfill), and
the gang gets the leaf at that time. With no gang waiting, whole leaves are kept for the
largest leaf gang seen: only work shorter than the bound may use them.
"""

from __future__ import annotations

import pytest

from scheduler import Locality, LocalityLevel, Placement, Unplaceable, schedule_pass
from scheduler.decisions import Reason
from scheduler.model import Lease
from scheduler.reserve import GangReserve, Reserved, ReserveSettings, plan_reserve

from .builders import as_lease, hgx_cluster, lease, req, snap, waiting_gang_case

POLICY = "fgd+fabric+reserve"
LEAF = Locality(LocalityLevel.LEAF, required=True)
LEAF_OF = {f"n{leaf:02d}{k:02d}": f"leaf{leaf}" for leaf in range(2) for k in range(4)}


GANG = req("gang", gpus=8, nodes=4, locality=LEAF, start=0, end=10_000)


# --- the plan (pure) --------------------------------------------------------------------

FREE = {"n0002": 100.0, "n0003": 100.0, "n0100": 900.0, "n0101": 900.0, "n0102": 900.0}


@pytest.mark.parametrize(("waiting", "keep_for", "settings", "expected"), [
    # a waiting gang owns the leaf that frees soonest, from that time
    ([("g", 4)], None, ReserveSettings(keep=0),
     [("leaf0", 100, 4, "g")]),
    # two waiting gangs: one leaf each, in queue order
    ([("g", 4), ("h", 4)], None, ReserveSettings(keep=0, max_waiting=8),
     [("leaf0", 100, 4, "g"), ("leaf1", 900, 4, "h")]),
    # EASY (the policy's setting, max_waiting=1): only the first waiting gang
    ([("g", 4), ("h", 4)], None, ReserveSettings(keep=0),
     [("leaf0", 100, 4, "g")]),
    # largest first: the larger gang owns the soonest leaf
    ([("s", 2), ("g", 4)], None, ReserveSettings(keep=0, largest_first=True),
     [("leaf0", 100, 4, "g")]),
    # a gang as large as the kept-for one uses the kept leaf: nothing more is kept
    ([("g", 4)], 4, ReserveSettings(keep=1),
     [("leaf0", 100, 4, "g")]),
    # no gang waits: the leaf freeing soonest is kept, from max(its free time, now+bound)
    ([], 4, ReserveSettings(keep=1, bound=600),
     [("leaf0", 600, 4, None)]),
    ([], 4, ReserveSettings(keep=1, bound=0),
     [("leaf0", 100, 4, None)]),
    # a smaller waiting gang owns the leaf where its 2 nodes are free now; one kept leaf
    ([("s", 2)], 4, ReserveSettings(keep=1),
     [("leaf0", 0, 2, "s"), ("leaf1", 900, 4, None)]),
    # drain_kept off: no whole leaf, so nothing is kept (no drain ahead of a burst)
    ([], 4, ReserveSettings(keep=1, drain_kept=False), []),
    # keep 0 and nothing waits: no reserve
    ([], 4, ReserveSettings(keep=0), []),
])
def test_plan_reserve_table(waiting, keep_for, settings, expected):
    plan = plan_reserve(waiting, keep_for, LEAF_OF, FREE, 0, settings)
    got = [(r.leaf, r.start, r.need, r.owner) for r in plan.leaves]
    assert got == expected


def test_kept_whole_leaf_without_drain():
    free = {"n0100": 900.0}
    plan = plan_reserve([], 4, LEAF_OF, free, 0, ReserveSettings(keep=2, drain_kept=False,
                                                                 bound=300))
    assert [(r.leaf, r.start, r.owner) for r in plan.leaves] == [("leaf0", 300, None)]


def test_plan_reserve_nodes_are_the_earliest_free_and_open_ended_never_reserved():
    free = {**FREE, "n0000": float("inf"), "n0001": float("inf")}
    plan = plan_reserve([("g", 2)], None, LEAF_OF, free, 0, ReserveSettings(keep=0))
    (r,) = plan.leaves
    assert (r.leaf, r.start) == ("leaf0", 100)  # n0002/n0003 at 100, not the open-ended
    assert r.nodes == {"n0002", "n0003"}
    plan = plan_reserve([("g", 4)], None, LEAF_OF, free, 0, ReserveSettings(keep=0))
    assert [r.leaf for r in plan.leaves] == ["leaf1"]  # leaf0 never frees 4 nodes


@pytest.mark.parametrize(("who", "end", "nodes", "admitted"), [
    ("g", 10_000, 4, True),     # the owner
    ("x", 10_000, 4, False),    # another gang as large: not an owned leaf's
    ("x", 100, 1, True),        # ends at the start: backfill
    ("x", 101, 1, False),       # ends after it
    ("x", None, 1, False),      # open-ended: never
])
def test_owned_leaf_admits(who, end, nodes, admitted):
    r = Reserved("leaf0", frozenset({"n0000"}), 100, 4, "g")
    assert r.admits(who, end, nodes) is admitted
    assert (GangReserve((r,)).blocked(who, end, nodes) == frozenset()) is admitted


def test_kept_leaf_admits_a_gang_as_large_and_short_work_only():
    r = Reserved("leaf0", frozenset({"n0000"}), 600, 4)
    assert r.admits("big", 10_000, 4) and r.admits("big", 10_000, 8)
    assert not r.admits("small-gang", 10_000, 2)
    assert r.admits("short", 600, 1) and not r.admits("long", 601, 1)


# --- through schedule_pass on a named topology ------------------------------------------

@pytest.mark.parametrize(("work", "expected"), [
    # (a) work ending after the reservation start (t=100) is not given leaf0
    (req("long", gpus=8, start=0, end=5_000, submitted_at=1), {"n0103"}),
    (req("long2", gpus=8, nodes=2, start=0, end=5_000, submitted_at=1), None),
    (req("open", gpus=8, start=0, end=None, submitted_at=1), {"n0103"}),
    # (b) work ending by then may backfill there
    (req("short2", gpus=8, nodes=2, start=0, end=100, submitted_at=1), {"n0000", "n0001"}),
])
def test_reserved_leaf_backfill_table(work, expected):
    by_id = schedule_pass(waiting_gang_case(), [GANG, work], now=0, policy=POLICY).by_id()
    gang = by_id["gang"]
    assert isinstance(gang, Unplaceable) and gang.earliest_start == 100
    got = by_id[work.id]
    if expected is None:
        assert isinstance(got, Unplaceable), got
        assert got.reason == Reason.RESERVED
        assert "leaf0" in got.detail and "gang" in got.detail and "t=100" in got.detail
    else:
        assert isinstance(got, Placement), got
        assert {p.node for p in got.parts} == expected


def test_waiting_gang_gets_its_leaf_at_the_reservation_time():
    """(c) A small timeline: t=0 the gang waits (start 100), a short job backfills leaf0
    and a long one goes elsewhere; t=50 a long pair arrives and is kept off leaf0; t=100
    the leases there have ended and the gang gets leaf0, ahead of the long pair."""
    s0 = waiting_gang_case()
    short = req("short", gpus=8, nodes=2, start=0, end=100, submitted_at=1)
    long_ = req("long", gpus=8, start=0, end=5_000, submitted_at=2)
    p0 = schedule_pass(s0, [GANG, short, long_], now=0, policy=POLICY).by_id()
    assert isinstance(p0["gang"], Unplaceable)
    assert isinstance(p0["short"], Placement) and isinstance(p0["long"], Placement)
    assert {p.node for p in p0["long"].parts} == {"n0103"}
    placed = (as_lease(p0["short"]), as_lease(p0["long"]))
    pair = req("pair", gpus=8, nodes=2, start=50, end=5_000, submitted_at=3)
    p50 = schedule_pass(waiting_gang_case(placed), [GANG, pair], now=50, policy=POLICY).by_id()
    assert isinstance(p50["gang"], Unplaceable) and isinstance(p50["pair"], Unplaceable)
    # t=100: a, b and short have ended
    nodes, topo = hgx_cluster(leaves=2, per_leaf=4)
    left = tuple(le for le in (*waiting_gang_case().leases, *placed) if le.end is None or le.end > 100)
    p100 = schedule_pass(snap(nodes, topo, leases=left), [pair, GANG], now=100,
                         policy=POLICY).by_id()
    gang = p100["gang"]
    assert isinstance(gang, Placement), gang
    assert {p.node for p in gang.parts} == {"n0000", "n0001", "n0002", "n0003"}
    assert gang.start == 100


def test_no_gang_waiting_keeps_a_whole_leaf_for_the_largest_leaf_gang():
    """A 4-node leaf gang runs on leaf1 (the largest leaf gang seen); leaf0 is whole and
    kept (bound 0): a long single job is refused as reserved rather than break it, a
    4-node leaf gang may take it."""
    nodes, topo = hgx_cluster(leaves=2, per_leaf=4)
    running = Lease("big", "t1", GANG.priority,
                    tuple(lease("x", f"n010{k}", list(range(8)), end=900).parts[0]
                          for k in range(4)), 0, 900, False, "H100")
    s = snap(nodes, topo, leases=(running,))
    long_ = req("long", gpus=8, start=0, end=5_000)
    got = schedule_pass(s, [long_], now=0, policy=POLICY).by_id()["long"]
    assert isinstance(got, Unplaceable) and got.reason == Reason.RESERVED
    gang = req("g2", gpus=8, nodes=4, locality=LEAF, start=0, end=5_000)
    assert isinstance(schedule_pass(s, [gang], now=0, policy=POLICY).by_id()["g2"], Placement)
