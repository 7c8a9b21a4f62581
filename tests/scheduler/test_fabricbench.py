"""``python -m scheduler.bench fabric``: seeded workload, CSV round trip, the table."""

from scheduler import bench, fabricbench
from scheduler.fabrics import fat_tree_2tier


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
