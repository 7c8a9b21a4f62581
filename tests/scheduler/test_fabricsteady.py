"""The steady-state command of the fabric benchmark (issue 30, ADR 0235)."""

from scheduler.bench.__main__ import main as bench_main
from scheduler.bench.fabricsteady import steady, steady_cells


def test_steady_command_prints_spread_leaf_frag_share_and_references(capsys):
    assert bench_main(["fabric", "--steady", "--jobs", "200", "--seeds", "42", "43",
                       "--loads", "0.9", "--fabrics", "rail", "--policies", "fgd+fabric",
                       "--reference", "no-leaf", "fluid"]) == 0
    out = capsys.readouterr().out
    table = out.split("\n\n")[1].splitlines()
    head = table[0]
    for col in ("gang p50 [min-max]", "gang p95 [min-max]", "p95 sd",
                "wait_leaf_frag_pct", "others mean", "others p95"):
        assert col in head
    body = table[2:]
    names = [line.split()[2] for line in body]
    assert names == ["fgd+fabric", "fgd+fabric", "fluid"]  # policy, its no-leaf, fluid
    assert "no-leaf" in body[1]
    cells = [line.replace(" no-leaf", "").split() for line in body]
    assert [c[3] for c in cells] == ["2", "2", "2"]  # two seeds per row
    assert all(c[5].startswith("[") and c[7].startswith("[") for c in cells)  # spreads
    assert cells[0][9].startswith("[") is False and cells[0][10].startswith("[")
    assert cells[2][9] == "-"  # the fluid pool has no leaves
    by_size = out.split("wait_leaf_frag_pct points by gang size")[1].splitlines()[1:]
    assert [line.split()[2] for line in by_size if line.strip()][:1] == ["fgd+fabric"]


def test_steady_cells_give_mean_and_range_across_seeds():
    rows = [{"load": 0.9, "fabric": "rail", "policy": "p", "seed": s,
             "gang_wait_p50_s": p50, "gang_wait_p95_s": p95, "wait_leaf_frag_pct": lf,
             "other_wait_mean_s": om, "other_wait_p95_s": op}
            for s, p50, p95, lf, om, op in ((42, 0, 100, 10.0, 2.0, 0),
                                            (43, 20, 300, 30.0, 4.0, 10))]
    (cell,) = steady_cells(rows)
    assert cell["gang_p50"] == "10 [0-20]"
    assert cell["gang_p95"] == "200 [100-300]"
    assert cell["gang_p95_sd"] == "100"
    assert cell["wait_leaf_frag_pct"] == "20.0 [10.0-30.0]"
    assert cell["other_wait_mean_s"] == "3.0 [2.0-4.0]"
    assert "200 [100-300]" in steady(rows)


def test_steady_cells_average_the_leaf_frag_points_per_gang_size():
    rows = [{"load": 0.9, "fabric": "rail", "policy": "p", "seed": s,
             "gang_wait_p50_s": 0, "gang_wait_p95_s": 1, "wait_leaf_frag_pct": 1.0,
             "other_wait_mean_s": 0.0, "other_wait_p95_s": 0, "leaf_frag_by_nodes": d}
            for s, d in ((42, {16: 30.0, 8: 10.0}), (43, {"16": 10.0}))]  # JSON keys too
    (cell,) = steady_cells(rows)
    assert cell["leaf_frag_by_nodes"] == "8:5.0 16:20.0"
    fluid = [{**rows[0], "policy": "fluid", "leaf_frag_by_nodes": None}]
    assert steady_cells(fluid)[0]["leaf_frag_by_nodes"] == "-"
