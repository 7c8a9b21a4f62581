"""The harness's overlap measures find an overlap when there is one (a harness that
cannot fail proves nothing): windows from lease events and sampled grant files."""

from __future__ import annotations

from pathlib import Path

from tests.security import bb_agents


def test_window_overlap_counts_only_different_tenants_on_one_gpu() -> None:
    windows = [("g0", "a", 0.0, 10.0), ("g0", "b", 9.5, 20.0),  # 0.5 s on g0
               ("g1", "a", 0.0, 10.0), ("g1", "a", 5.0, 20.0),  # same tenant: fine
               ("g2", "a", 0.0, 10.0), ("g2", "b", 10.0, 20.0)]  # back to back: fine
    assert bb_agents.window_overlap(windows) == 0.5


def test_sampled_overlap_is_the_longest_run_of_shared_samples() -> None:
    tenant_of = {"ls_a": "a", "ls_b": "b"}
    samples = [(0.0, {"ls_a": {"n/GPU-0"}}),
               (1.0, {"ls_a": {"n/GPU-0"}, "ls_b": {"n/GPU-0"}}),
               (1.5, {"ls_a": {"n/GPU-0"}, "ls_b": {"n/GPU-0", "n/GPU-1"}}),
               (2.0, {"ls_b": {"n/GPU-0"}}),
               (3.0, {"ls_a": {"n/GPU-1"}, "ls_b": {"n/GPU-0"}})]  # different GPUs
    assert bb_agents.sampled_overlap(samples, tenant_of) == 0.5


def test_grant_files_are_read_as_the_agent_writes_them(tmp_path: Path) -> None:
    leases = tmp_path / "node-0001" / "access" / "etc" / "gpupool" / "leases"
    leases.mkdir(parents=True)
    (leases / "ls_1.env").write_text("# gpupool lease ls_1\nexport CUDA_VISIBLE_DEVICES="
                                     "GPU-a,GPU-b\nexport GPUPOOL_LEASE_ID=ls_1\n")
    keys = tmp_path / "node-0001" / "access" / "home" / "ls_1" / ".ssh"
    keys.mkdir(parents=True)
    (keys / "authorized_keys").write_text("ssh-ed25519 AAAAkey x@y\n")
    roots = [tmp_path / "node-0001" / "access"]
    assert bb_agents.granted_gpus(roots) == {"ls_1": {"node-0001/GPU-a", "node-0001/GPU-b"}}
    assert bb_agents.wait_keys(roots, "ssh-ed25519 AAAAkey x@y", True, 1) < 1
    assert bb_agents.wait_keys(roots, "ssh-ed25519 AAAAkey x@y", False, 0.1) == float("inf")
