import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents import config
from agents.cli import main
from agents.client.fakeportal import FakePortal, serve
from agents.sim.simulate import parser_for_tests
from agents.sysfs.faketree import FakeSysfsWriter, gpu_node_hcas
from tests.agents.helpers import write_node_config

ROOT = Path(__file__).resolve().parents[2]


def test_once_json_with_fake_gpus(node_exporter_sys: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["node", "--once", "--sysfs-root", str(node_exporter_sys),
                 "--fake-gpus", "h100x8"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["gpus"]) == 8
    assert out["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert {p["device"] for p in out["ib_ports"]} == {"i40iw0", "mlx4_0"}
    mlx = next(p for p in out["ib_ports"] if p["device"] == "mlx4_0" and p["port"] == 1)
    assert mlx["rcv_bytes"] == 18527668
    assert mlx["saturated"] == ["port_xmit_wait"]


def test_once_prometheus(node_exporter_sys: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["node", "--once", "--sysfs-root", str(node_exporter_sys),
                 "--fake-gpus", "a100x2", "--format", "prometheus"]) == 0
    text = capsys.readouterr().out
    assert 'modelName="NVIDIA A100-SXM4-80GB"' in text
    assert 'node_infiniband_port_data_received_bytes_total{device="mlx4_0",port="1"}' in text


def test_once_without_driver_still_reports_ib_and_host(node_exporter_sys: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "agents", "node", "--once", "--sysfs-root", str(node_exporter_sys)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**os.environ, "LD_LIBRARY_PATH": "/nonexistent"},
    )
    assert proc.returncode == 0
    out = json.loads(proc.stdout)
    if out["gpu_system"]["available"]:
        pytest.skip("this machine has an NVIDIA driver")
    assert "no GPU driver" in proc.stderr
    assert out["gpus"] == []
    assert len(out["ib_ports"]) == 3
    assert out["host"]["hostname"]


def test_config_file_and_env_overrides(tmp_path: Path) -> None:
    cfg_file = tmp_path / "agent.toml"
    cfg_file.write_text('[portal]\nurl = "https://portal.example"\n[agent]\nsample_interval_s = 5\n')
    cfg = config.load(cfg_file, config.NODE_DEFAULTS, env={
        "GPUPOOL_AGENT_PORTAL_BOOTSTRAP_TOKEN": "gpb_x", "GPUPOOL_AGENT_AGENT_LONG_POLL_S": "12"})
    assert cfg["portal"]["url"] == "https://portal.example"
    assert cfg["portal"]["bootstrap_token"] == "gpb_x"
    assert cfg["agent"]["sample_interval_s"] == 5
    assert cfg["agent"]["long_poll_s"] == 12
    cfg_file.write_text("[portal]\nnope = 1\n")
    with pytest.raises(config.ConfigError, match="unknown key portal.nope"):
        config.load(cfg_file, config.NODE_DEFAULTS, env={})
    with pytest.raises(config.ConfigError, match="not a int"):
        config.load(None, config.NODE_DEFAULTS, env={"GPUPOOL_AGENT_AGENT_LONG_POLL_S": "x"})


def test_node_daemon_reports_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    portal = FakePortal()
    server = serve(portal)
    writer = FakeSysfsWriter(tmp_path / "sys")
    for hca in gpu_node_hcas(3):
        writer.add(hca)
    cfg = write_node_config(tmp_path, f"http://127.0.0.1:{server.server_address[1]}",
                            "h200x4", "127.0.0.1:0")
    env = {**os.environ, "GPUPOOL_AGENT_PORTAL_BOOTSTRAP_TOKEN": portal.issue_bootstrap_token()}
    proc = subprocess.Popen([sys.executable, "-m", "agents", "node", "--config", str(cfg)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if portal.nodes and len(next(iter(portal.nodes.values())).reports) >= 2:
                break
            time.sleep(0.1)
        node = next(iter(portal.nodes.values()))
        assert len(node.reports) >= 2
        assert len(node.reports[-1]["telemetry"][0]["gpus"]) == 4
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        server.shutdown()
    assert proc.returncode == 0
    logs = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    msgs = [entry["msg"] for entry in logs]
    assert "enrolled" in msgs
    assert "shutting down" in msgs
    assert msgs[-1] == "agent stopped"
    assert all({"ts", "level", "logger", "msg"} <= set(e) for e in logs)


def test_simulator_against_loopback_portal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    portal = FakePortal()
    server = serve(portal)
    token = portal.issue_bootstrap_token(uses=8)
    try:
        args = parser_for_tests().parse_args([
            "--portal", f"http://127.0.0.1:{server.server_address[1]}", "--nodes", "8",
            "--bootstrap-token", token, "--gpus", "h100x2", "--interval", "0.3",
            "--duration", "2.5", "--workers", "4", "--state-dir", str(tmp_path)])
        from agents.sim.simulate import run

        assert run(args) == 0
    finally:
        server.shutdown()
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["enrolled"] == 8
    assert result["rejected"] == 0
    assert result["dropped"] == 0
    assert result["reports_sent"] >= 8
    assert len(portal.nodes) == 8
    assert {n.hostname for n in portal.nodes.values()} == {f"sim-node-{i:04d}" for i in range(1, 9)}


def test_fabric_daemon_applies_partition_map(tmp_path: Path) -> None:
    portal = FakePortal()
    server = serve(portal)
    cfg = tmp_path / "fabric.toml"
    cfg.write_text(f"""
[portal]
url = "http://127.0.0.1:{server.server_address[1]}"
bootstrap_token = "{portal.issue_bootstrap_token()}"
[agent]
state_dir = "{tmp_path / 'state'}"
sample_interval_s = 0.3
report_interval_s = 0.3
long_poll_s = 1
[hardware]
sysfs_root = "{tmp_path / 'sys'}"
[fabric]
driver = "fake"
""")
    proc = subprocess.Popen([sys.executable, "-m", "agents", "fabric", "--config", str(cfg)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not portal.nodes and time.monotonic() < deadline:
            time.sleep(0.1)
        node = next(iter(portal.nodes.values()))
        assert node.role == "fabric"
        gen = portal.set_desired(node.node_id, partitions=[
            {"name": "tenant_a", "pkey": "0x0101", "ipoib": True,
             "members": [{"guid": "0x0000000000100009", "membership": "full"}]}])
        while time.monotonic() < deadline:
            if node.reports and node.reports[-1]["observed"]["generation_applied"] == gen:
                break
            time.sleep(0.1)
        observed = node.reports[-1]["observed"]
        assert observed["generation_applied"] == gen
        assert observed["manager"] == "fake"
        assert observed["drift"] == []
        os.kill(proc.pid, signal.SIGTERM)
        proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        server.shutdown()
    assert proc.returncode == 0


@pytest.mark.parametrize(("name", "defaults"), [("agent.toml", config.NODE_DEFAULTS),
                                                ("fabric.toml", config.FABRIC_DEFAULTS)])
def test_example_configs_load(name: str, defaults: dict) -> None:
    cfg = config.load(ROOT / "agents" / "examples" / name, defaults, env={})
    assert cfg == {k: {**defaults[k], **cfg[k]} for k in defaults}
    assert cfg["portal"]["url"] == "https://gpupool.example.org"


def test_fakeportal_and_faketree_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["faketree", "--out", str(tmp_path / "sys"), "--node-index", "4", "--hcas", "2"]) == 0
    assert (tmp_path / "sys/class/infiniband/mlx5_1/ports/1/rate").read_text() == "400 Gb/sec (4X NDR)\n"
    proc = subprocess.Popen([sys.executable, "-m", "agents", "fakeportal", "--listen", "127.0.0.1:0"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        from agents.client.portal import PortalClient

        client = PortalClient(info["url"])
        cred = client.enrol({"protocol": 1, "bootstrap_token": info["bootstrap_token"],
                             "role": "node", "hostname": "demo", "agent_version": "0"})
        assert cred.node_id.startswith("nd_")
        assert client.desired_state(0, 0) is None
        client.close()
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
