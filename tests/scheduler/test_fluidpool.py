"""The fluid-pool reference of the fabric benchmark (``--reference fluid``, ADR 0176)."""

from scheduler.bench import fabricbench
from scheduler.bench.fabricbench import Job
from scheduler.bench.fluidpool import simulate_fluid
from scheduler.fabrics import fat_tree_2tier


def _jobs() -> list[Job]:
    """12 GPUs: A (4 GPUs, 10 s) and B (4 GPUs, 2,000 s) at t=0, S (4 GPUs, 1,000 s) at
    t=1, an 8-GPU gang at t=5."""
    return [
        Job("a", 0, 10, "single", 4, 1000, 1, False, "t0"),
        Job("b", 0, 2000, "single", 4, 1000, 1, False, "t0"),
        Job("s", 1, 1000, "single", 4, 1000, 1, False, "t0"),
        Job("g", 5, 100, "gang", 4, 1000, 2, True, "t0"),
    ]


def test_without_headroom_the_gang_waits_for_the_order_that_passed_it():
    out = simulate_fluid(_jobs(), 12)
    # A, B and S start at once; the gang waits for S (t=1,001): 996 s.
    assert out["gang_wait_p95_s"] == 996.0
    assert out["other_wait_p95_s"] == 0.0
    assert out["never_placed"] == 0


def test_headroom_for_gangs_moves_the_wait_onto_the_other_orders():
    out = simulate_fluid(_jobs(), 12, gang_headroom_gpus=8)
    # B and S may not take the last 8 GPUs: the gang starts on arrival; B starts when the
    # gang ends (t=105, waited 105 s), S when B ends (t=2,105, waited 2,104 s).
    assert out["gang_wait_p95_s"] == 0.0
    assert out["other_wait_p95_s"] == 2104.0
    assert out["other_wait_mean_s"] == round((0 + 105 + 2104) / 3, 1)


def test_a_job_beyond_the_retry_window_is_not_tried():
    jobs = [Job("big", 0, 100, "single", 6, 1000, 1, False, "t0"),
            Job("x", 1, 10, "single", 8, 1000, 1, False, "t0"),
            Job("g", 2, 10, "gang", 1, 1000, 2, True, "t0")]
    # The gang fits the 2 free GPUs at once; with a window of 1 only x (first in line,
    # too large) is tried, and the gang waits for big and then x to end (t=110).
    assert simulate_fluid(jobs, 8)["gang_wait_p95_s"] == 0.0
    assert simulate_fluid(jobs, 8, window=1)["gang_wait_p95_s"] == 108.0


def test_the_benchmark_prints_the_references_next_to_the_policies(capsys):
    from scheduler.bench.__main__ import main as bench_main

    assert bench_main(["fabric", "--jobs", "150", "--fabrics", "2-tier",
                       "--reference", "no-leaf", "fluid"]) == 0
    out = capsys.readouterr().out
    assert "fgd+fabric no-leaf" in out and "fluid" in out and "other_wait_p95_s" in out


def test_no_leaf_rows_replay_the_same_jobs_without_the_requirement():
    jobs = fabricbench.workload(3, 300, 4096, 0.9)
    relaxed = fabricbench.without_leaf_requirement(jobs)
    assert any(j.leaf_required for j in jobs)
    assert not any(j.leaf_required for j in relaxed)
    assert [(j.id, j.arrival, j.duration, j.nodes) for j in relaxed] == [
        (j.id, j.arrival, j.duration, j.nodes) for j in jobs]


def test_fluid_row_has_no_leaf_columns_and_counts_what_never_fits():
    nodes, topo = fat_tree_2tier(leaves=4, per_leaf=4, spines=2)
    jobs = fabricbench.workload(1, 200, 128, 0.9)
    row = fabricbench.fluid_row(nodes, topo, jobs)
    assert row["policy"] == "fluid"
    assert row["leaf_frag_pct"] == "-" and row["gangs_one_leaf_pct"] == "-"
    assert row["refused"] > 0  # 16-node gangs on leaves of 4 nodes never fit
    assert set(fabricbench.COLUMNS) <= set(row)


def test_single_node_orders_report_their_wait():
    nodes, topo = fat_tree_2tier(leaves=2, per_leaf=2, spines=1)
    jobs = [Job(f"f{k}", 0, 100, "single", 8, 1000, 1, False, "t0") for k in range(4)]
    jobs.append(Job("late", 10, 50, "single", 1, 1000, 1, False, "t0"))
    ctx = fabricbench.context(nodes, topo, jobs)
    row = fabricbench.simulate(nodes, topo, jobs, "fgd+fabric", ctx)
    assert row["other_wait_p95_s"] == 90.0  # waits from t=10 until the first node frees
    assert row["other_wait_mean_s"] == 18.0


def test_fluid_rows_per_headroom_are_named_by_it():
    nodes, topo = fat_tree_2tier(leaves=4, per_leaf=4, spines=2)
    jobs = fabricbench.workload(1, 200, 128, 0.9)
    plain, kept = (fabricbench.fluid_row(nodes, topo, jobs, gpus) for gpus in (0, 8))
    assert (plain["policy"], kept["policy"]) == ("fluid", "fluid headroom 8")
    assert kept["other_wait_mean_s"] >= plain["other_wait_mean_s"]
