"""``python -m scheduler.bench fabric``: seeded workload, CSV round trip, the table."""

from scheduler import bench, fabricbench
from scheduler.fabrics import fat_tree_2tier
from scheduler.model import NodeAllocation


def test_workload_is_seeded_and_round_trips_as_csv(tmp_path):
    a = fabricbench.workload(7, 300, 1024, 0.9)
    assert a == fabricbench.workload(7, 300, 1024, 0.9)
    assert {j.kind for j in a} == {"fractional", "single", "gang"}
    assert all(2 <= j.nodes <= 16 for j in a if j.kind == "gang")
    path = tmp_path / "w.csv"
    fabricbench.write_csv(path, a)
    assert fabricbench.read_csv(path) == a


def test_simulate_reports_every_metric():
    nodes, topo = fat_tree_2tier(leaves=4, per_leaf=4, spines=2)
    jobs = fabricbench.workload(1, 200, 128, 0.9)
    ctx = fabricbench.context(nodes, topo, jobs)
    rows = [fabricbench.simulate(nodes, topo, jobs, p, ctx) for p in ("fgd+", "fgd+fabric")]
    for r in rows:
        assert set(fabricbench.COLUMNS) <= set(r)
        assert 0 < r["alloc_pct"] <= 100 and 0 <= r["leaf_frag_pct"] <= 100
        assert r["never_placed"] == 0 and r["refused"] > 0  # 16-node gangs: leaves of 4


def test_cli_prints_policies_side_by_side(capsys):
    assert bench.main(["fabric", "--jobs", "150", "--fabrics", "rail"]) == 0
    out = capsys.readouterr().out
    assert "== rail" in out and "fgd+fabric" in out and "gang_wait_p95_s" in out


def _sim_with_waiting_gang(policy):
    """4 leaves × 4 nodes, every leaf with one busy node (the earliest free: leaf 2,
    t=100): a 4-node leaf-required gang waits."""
    nodes, topo = fat_tree_2tier(leaves=4, per_leaf=4, spines=2)
    gang = fabricbench.Job("g", 0, 3600, "gang", 8, 1000, 4, True, "t0")
    ctx = fabricbench.context(nodes, topo, [gang])
    sim = fabricbench._Sim(nodes, topo, policy, ctx, 4)
    by_leaf = {}
    for n in nodes:
        by_leaf.setdefault(topo.leaf_of(n.name), []).append(n.name)
    for k, leaf in enumerate(sorted(by_leaf)):
        first = by_leaf[leaf][0]
        sim.state.consume(NodeAllocation(first, tuple((g, 1000) for g in range(8)), 0, 0))
        sim.free_at[first] = 100.0 if k == 2 else 900.0
    sim.waiting.append(gang)
    sim.plan(0)
    return sim, by_leaf


def test_bench_hold_policy_holds_the_leaf_that_frees_soonest_for_the_waiting_gang():
    # Finding (issue 11): in the bench, smaller jobs passed a waiting leaf gang freely.
    sim, by_leaf = _sim_with_waiting_gang("fgd+fabric+hold")
    hold = sim.state.hold
    assert hold is not None and hold.owner == "g" and hold.start == 100
    assert hold.nodes == frozenset(by_leaf[sorted(by_leaf)[2]])
    long_job = fabricbench.Job("long", 0, 5000, "single", 8, 1000, 1, False, "t0")
    assert sim.try_place(long_job, 0)  # off the held leaf
    assert sim.running["long"][0][0].node not in hold.nodes


def test_bench_fgd_plus_keeps_no_hold():
    sim, _ = _sim_with_waiting_gang("fgd+")
    assert sim.state.hold is None


def test_bench_default_policy_holds_nothing():
    """The hold is opt-in: measured, it cost the next-largest gangs more than it saved."""
    sim, _ = _sim_with_waiting_gang("fgd+fabric")
    assert sim.state.hold is None


def test_bench_default_drains_a_leaf_per_waiting_leaf_gang():
    # Two 4-node leaf gangs wait: leaf 2 frees soonest (t=100) and goes to the first,
    # the second gets its own (leaf 0: ties at t=900 to the lowest name). Before, one
    # leaf was drained and the second gang's leaf kept filling up.
    from scheduler.fabric import DRAIN

    sim, _ = _sim_with_waiting_gang("fgd+fabric")
    sim.waiting.append(fabricbench.Job("g2", 0, 3600, "gang", 8, 1000, 4, True, "t0"))
    sim.plan(0)
    leaves = sim.state.leaves
    assert {lid for lid, f in enumerate(leaves.flags) if f & DRAIN} == {0, 2}


def test_sweep_summary_counts_halved_seeds():
    from scheduler.fabricsweep import summary

    def row(policy, seed, p95):
        return {"policy": policy, "seed": seed, "load": 0.9, "fabric": "rail",
                "gang_wait_p95_s": p95, "gang_wait_mean_s": 1.0, "other_wait_mean_s": 2.0,
                "other_wait_p95_s": 3.0, "alloc_pct": 80.0,
                "leaf_frag_pct": 10.0, **{f"wait_{b}_pct": 25.0 for b in
                                          ("capacity", "overtaken", "leaf_frag",
                                           "node_frag")}}
    rows = [row("fgd+", 1, 100.0), row("x", 1, 50.0), row("fgd+", 2, 100.0),
            row("x", 2, 80.0), row("fgd+", 3, 0.0), row("x", 3, 0.0)]
    table = summary(rows)
    assert "fgd+ (today)" in table and " 1/2 " in table
