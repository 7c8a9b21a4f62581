"""The MIG benchmark on openb (``python -m scheduler.bench.replay mig``, ADR 0236)."""

import json
import random
from collections import Counter
from pathlib import Path

from scheduler.bench.replay import mig
from scheduler.bench.replay.__main__ import main
from scheduler.bench.replay.trace import Pod, load_nodes, load_pods
from scheduler.migplace import MigRequest, MigWait, place_request
from scheduler.model import Gpu, Node
from scheduler.policy import get_policy

DATA = Path(__file__).parent / "data"
POLICY = get_policy("bestfit")


def _pod(name, milli, cpu=1000, mem=1024):
    return Pod(name, cpu, mem, 1, milli, frozenset())


def test_each_share_gets_the_smallest_profile_covering_compute_and_memory():
    got = {m: mig.profile_for("A100", m) for m in (50, 110, 130, 140, 230, 250, 320, 470,
                                                     500, 550, 810)}
    assert got == {50: "1g.10gb", 110: "1g.10gb", 130: "1g.20gb", 140: "1g.20gb",
                   230: "2g.20gb", 250: "2g.20gb", 320: "3g.40gb", 470: "4g.40gb",
                   500: "4g.40gb", 550: "7g.80gb", 810: "7g.80gb"}
    assert mig.profile_for("T4", 100) is None


def test_tenants_are_a_seeded_zipf_draw():
    a = mig.zipf_tenants(5000, 16, 1.0, 42)
    assert a == mig.zipf_tenants(5000, 16, 1.0, 42)
    assert a != mig.zipf_tenants(5000, 16, 1.0, 43)
    counts = Counter(a)
    assert set(counts) <= set(range(16))
    assert counts[0] > 2 * counts[1] * 0.8 and counts[1] > counts[15]


def test_mig_serves_tenants_time_slicing_keeps_apart():
    # One G2 GPU (taken for an A100), three tenants' 300-milli pods: time-sliced, only
    # the first tenant's pod may use the GPU; MIG gives two of them a 3g.40gb each; no
    # isolation at all (the reference) would fit all three.
    nodes = [Node("n0", 64000, 262144, (Gpu(0, "G2"),))]
    pods = [_pod(f"p{i}", 300) for i in range(3)]
    placed = {mode: mig.run(nodes, pods, pods, [0, 1, 2], mode, POLICY)
              for mode in mig.MODES}
    assert placed["timeslice"]["placed"] == 1
    assert placed["timeslice"]["tenants_served"] == 1
    assert placed["mig"]["placed"] == 2 and placed["mig"]["on_mig"] == 2
    assert placed["mig"]["tenants_served"] == 2
    assert placed["mig"]["held_pct_end"] == 100.0  # two 3g.40gb: 0.5 GPU each
    assert placed["shared"]["placed"] == 3


def test_host_cpu_binds_mig_instances_too():
    nodes = [Node("n0", 1500, 262144, (Gpu(0, "G2"),))]
    pods = [_pod(f"p{i}", 100) for i in range(3)]
    r = mig.run(nodes, pods, pods, [0, 1, 2], "mig", POLICY)
    assert r["placed"] == 1


def test_a_pod_no_mig_gpu_takes_falls_back_to_time_slicing_on_the_others():
    nodes = [Node("a", 64000, 262144, (Gpu(0, "G2"),)),
             Node("b", 64000, 262144, (Gpu(0, "T4"),))]
    pods = [_pod("p0", 810), _pod("p1", 810)]
    r = mig.run(nodes, pods, pods, [0, 1], "mig", POLICY)
    assert (r["placed"], r["on_mig"]) == (2, 1)


def test_pruned_gpus_give_the_placers_own_answer():
    # The pool hands place_request fewer GPUs; each pick must be the one it makes over
    # every MIG GPU of the cluster.
    nodes = [Node(f"n{i:02d}", 10**9, 10**9, tuple(Gpu(g, "G2") for g in range(size)))
             for i, size in enumerate((8, 8, 4, 8, 1, 4, 8, 1))]
    pool = mig.MigPool(nodes, mig.DEFAULT_MIG_MODELS)
    rng = random.Random(5)
    for step in range(250):
        milli = rng.choice((50, 110, 140, 230, 320, 470, 650))
        profile = mig.profile_for("A100", milli)
        every = [g for n in pool.nodes.values() for g in n.gpus]
        want = place_request(every, MigRequest("x", profile, 1, pool.models))
        took = pool.take(_pod(f"p{step}", milli), profile, "x")
        if isinstance(want, MigWait):
            assert not took
            continue
        assert took
        (pick,) = want
        gpu = next(g for g in pool.nodes[pick.node].gpus if g.index == pick.index)
        assert gpu.layout[-1] == (profile, pick.start)


def test_without_mig_models_mig_is_time_slicing_exactly():
    nodes = load_nodes(DATA / "nodes_slice.csv")
    pods = mig.fractional(load_pods(DATA / "pods_slice.csv"))
    tenants = mig.zipf_tenants(len(pods), 8, 1.0, 42)
    a = mig.run(nodes, pods, pods, tenants, "timeslice", POLICY, {})
    b = mig.run(nodes, pods, pods, tenants, "mig", POLICY, {})
    assert b["on_mig"] == 0
    assert {k: v for k, v in a.items() if k != "mode"} == \
        {k: v for k, v in b.items() if k != "mode"}


def test_cli_prints_the_table_per_seed_and_the_means(tmp_path, capsys):
    out = tmp_path / "m.json"
    assert main(["mig", "--nodes", str(DATA / "nodes_slice.csv"), "--pods",
                 str(DATA / "pods_slice.csv"), "--seeds", "42", "43", "--tenants", "8",
                 "--tune", "1.0", "--policy", "bestfit", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "alloc@100" in text and "G2 as A100" in text
    assert sum(line.startswith("mean ") for line in text.splitlines()) == 3
    reports = json.loads(out.read_text())
    assert [(r["seed"], r["mode"]) for r in reports] == [
        (s, m) for s in (42, 43) for m in mig.MODES]
    by = {(r["seed"], r["mode"]): r for r in reports}
    assert by[(42, "mig")]["on_mig"] > 0
    assert by[(42, "timeslice")]["on_mig"] == 0


def test_pass_benchmark_has_a_mig_column(capsys):
    from scheduler.bench import passbench
    assert passbench.main(["--nodes", "40", "--queue", "30", "--mig", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[-3:] == ["mig", "mig_placed", "mig_ms/req"]
    orders, placed = int(out[2].split()[-3]), int(out[2].split()[-2])
    assert orders == 3 and 0 <= placed <= 3
