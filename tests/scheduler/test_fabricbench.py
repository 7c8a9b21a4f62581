"""``python -m scheduler.bench fabric``: seeded workload, CSV round trip, the table."""

from dataclasses import replace

from scheduler.bench import fabricbench
from scheduler.bench.__main__ import main as bench_main
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
    assert bench_main(["fabric", "--jobs", "150", "--fabrics", "rail"]) == 0
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
    from scheduler.bench.fabricsweep import summary

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


def test_spot_share_marks_small_jobs_only_and_keeps_the_workload(tmp_path):
    plain = fabricbench.workload(5, 2000, 4096, 0.9)
    mixed = fabricbench.workload(5, 2000, 4096, 0.9, spot=0.5)
    assert [(j.id, j.arrival, j.duration, j.nodes, j.gpus) for j in plain] == [
        (j.id, j.arrival, j.duration, j.nodes, j.gpus) for j in mixed]
    assert not any(j.spot for j in mixed if j.kind == "gang")
    small = [j for j in mixed if j.kind != "gang"]
    assert 0.45 < sum(j.spot for j in small) / len(small) < 0.55
    path = tmp_path / "spot.csv"
    fabricbench.write_csv(path, mixed)
    assert fabricbench.read_csv(path) == mixed
    # A CSV written before the spot column reads as on-demand work.
    lines = path.read_text().splitlines()
    path.write_text("\n".join(line.rsplit(",", 1)[0] for line in lines) + "\n")
    assert fabricbench.read_csv(path) == [replace(j, spot=False) for j in mixed]


def _whole(node):
    return (NodeAllocation(node, tuple((g, 1000) for g in range(8)), 0, 0),)


def _spot_case():
    """2 leaves × 2 nodes: leaf A has one idle node and one running a spot job (t=0 to
    600), leaf B two nodes of on-demand work until t=1,000; a 2-node leaf gang arrives
    at t=10 and fits only by preempting the spot job."""
    nodes, topo = fat_tree_2tier(leaves=2, per_leaf=2, spines=1)
    leaves = {}
    for n in nodes:
        leaves.setdefault(topo.leaf_of(n.name), []).append(n.name)
    (a_idle, a_spot), b_nodes = sorted(leaves.values())
    spot = fabricbench.Job("spot", 0, 600, "single", 8, 1000, 1, False, "t1", spot=True)
    busy = [fabricbench.Job(f"od{k}", 0, 1000, "single", 8, 1000, 1, False, "t0")
            for k in range(2)]
    gang = fabricbench.Job("gang", 10, 100, "gang", 8, 1000, 2, True, "t2")
    ctx = fabricbench.context(nodes, topo, [spot, *busy, gang])
    sim = fabricbench._Sim(nodes, topo, "fgd+fabric", ctx, 2)
    for job, node in ((spot, a_spot), *zip(busy, b_nodes)):
        parts = _whole(node)
        for part in parts:
            sim.state.consume(part)
        sim.start(job, parts, 0)
    return sim, gang, (a_idle, a_spot)


def test_a_gang_preempts_spot_work_and_the_victim_requeues_with_what_it_had_left():
    sim, gang, leaf_a = _spot_case()
    assert sim.try_place(gang, 10)
    assert {p.node for p in sim.running["gang"][0]} == set(leaf_a)
    assert sim.preemptions == 1
    assert "spot" not in sim.running and "spot" not in sim.spot
    (again,) = sim.requeued
    assert again.arrival == 10 and again.duration == 590 and again.spot
    assert sim.gang_wait_of["gang"] == 0.0
    assert sim.allocated == 4 * 8 * 1000  # every node full: the gang's two, leaf B's two
    assert sum(sum(f.values()) for f in sim.state.gpu_free) == 0  # nothing double-freed


def test_spot_work_is_never_preempted_by_spot_work():
    sim, gang, _ = _spot_case()
    assert not sim.try_place(replace(gang, id="spotgang", spot=True), 10)
    assert sim.preemptions == 0 and "spot" in sim.running


def test_a_spot_run_preempts_requeues_and_places_every_job():
    nodes, topo = fat_tree_2tier(leaves=4, per_leaf=4, spines=2)
    jobs = [j for j in fabricbench.workload(2, 400, 128, 0.95, spot=0.6) if j.nodes <= 4]
    ctx = fabricbench.context(nodes, topo, jobs)
    row = fabricbench.simulate(nodes, topo, jobs, "fgd+fabric", ctx)
    assert row["preempted"] > 0 and row["never_placed"] == 0


def test_spot_jobs_are_retried_after_the_others():
    nodes, topo = fat_tree_2tier(leaves=1, per_leaf=1, spines=1)
    jobs = [fabricbench.Job("s", 0, 10, "single", 8, 1000, 1, False, "t0", spot=True),
            fabricbench.Job("o", 1, 10, "single", 8, 1000, 1, False, "t0")]
    ctx = fabricbench.context(nodes, topo, jobs)
    sim = fabricbench._Sim(nodes, topo, "fgd+", ctx, 2)
    sim.waiting = list(jobs)
    placed = sim.retry(0)
    assert [j.id for j in placed] == ["o"]
    assert [j.id for j in sim.waiting] == ["s"]
