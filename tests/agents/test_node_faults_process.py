"""A RUNNING ``python -m agents node`` takes faults from outside (issue 27): an XID
appended to its ``--fake-faults`` file and a port the kernel set down in its sysfs tree
show in the reports the portal receives; a desired validation is run and reported."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agents import protocol
from agents.client.fakeportal import FakeNode, FakePortal, serve
from agents.sysfs.faketree import FakeSysfsWriter, gpu_node_hcas

ROOT = Path(__file__).resolve().parents[2]


class Running:
    def __init__(self, tmp: Path) -> None:
        self.portal = FakePortal(heartbeat_interval_s=1)  # the agent reports every 1 s
        self.server = serve(self.portal)
        self.writer = FakeSysfsWriter(tmp / "sys")
        for hca in gpu_node_hcas(3):
            self.writer.add(hca)
        self.faults = tmp / "faults.jsonl"
        cfg = tmp / "agent.toml"
        cfg.write_text(f"""
[portal]
url = "http://127.0.0.1:{self.server.server_address[1]}"
[agent]
state_dir = "{tmp / 'state'}"
sample_interval_s = 0.2
report_interval_s = 0.2
long_poll_s = 1
[hardware]
sysfs_root = "{tmp / 'sys'}"
access_root = "{tmp / 'root'}"
[metrics]
listen = ""
""")
        env = {**os.environ,
               "GPUPOOL_AGENT_PORTAL_BOOTSTRAP_TOKEN": self.portal.issue_bootstrap_token()}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agents", "node", "--config", str(cfg), "--fake-gpus",
             "h100x8", "--fake-faults", str(self.faults)],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    @property
    def node(self) -> FakeNode:
        return next(iter(self.portal.nodes.values()))

    def wait_for(self, what: Callable[[dict[str, Any]], bool], after: int = 0,
                 timeout: float = 20.0) -> dict[str, Any]:
        """The first report (from index ``after`` on) for which ``what`` holds."""
        deadline = time.monotonic() + timeout
        seen = after
        while time.monotonic() < deadline:
            reports = self.node.reports if self.portal.nodes else []
            for report in reports[seen:]:
                if what(report):
                    return report
            seen = max(seen, len(reports))
            time.sleep(0.05)
        raise AssertionError("no such report")

    def inject(self, line: dict[str, Any]) -> None:
        with self.faults.open("a") as f:
            f.write(json.dumps(line) + "\n")

    def stop(self) -> str:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            _, err = self.proc.communicate(timeout=20)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.server.shutdown()
        return err


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Running]:
    r = Running(tmp_path)
    yield r
    r.stop()


def _xids(report: dict[str, Any]) -> list[int]:
    return [e["xid"] for t in report["telemetry"] for e in t.get("xid_events", [])]


def _port(report: dict[str, Any]) -> dict[str, Any] | None:
    ports = [p for t in report["telemetry"] for p in t["ib_ports"] if p["device"] == "mlx5_0"]
    return ports[-1] if ports else None


def test_running_agent_reports_an_appended_xid_and_a_port_gone_down(running: Running) -> None:
    first = running.wait_for(lambda r: bool(r["telemetry"]))
    assert _xids(first) == [] and _port(first)["state_id"] == 4  # type: ignore[index]
    start = len(running.node.reports)
    running.inject({"gpu": 3, "xid": 79})
    hit = running.wait_for(lambda r: 79 in _xids(r), after=start)
    gpu = hit["telemetry"][-1]["gpus"][3]
    assert gpu["last_xid"] == 79 and gpu["healthy"] is False
    assert hit["seq"] <= running.node.reports[start]["seq"] + 2  # in the next report or so

    start = len(running.node.reports)
    running.writer.link_down("mlx5_0", 1)
    down = running.wait_for(lambda r: (_port(r) or {}).get("state_id") == 1, after=start)
    port = _port(down)
    assert port is not None and port["phys_state_id"] == 3 and port["phys_state"] == "Disabled"
    assert port["counters"]["link_downed"] == 1
    assert running.portal.rejected == []


def test_running_agent_runs_a_desired_validation_and_reports_its_result(
        running: Running) -> None:
    running.wait_for(lambda r: bool(r["telemetry"]))
    running.inject({"gpu": 1, "ecc_dbe": 1})
    running.wait_for(lambda r: r["telemetry"] and r["telemetry"][-1]["gpus"][1].get(
        "ecc_uncorrected_volatile") == 1)
    running.portal.set_desired(running.node.node_id, validation={"id": "vl_1", "level": 1})
    failed = running.wait_for(lambda r: "finished_at" in r["observed"].get(
        "validation", {}))["observed"]["validation"]
    assert failed["id"] == "vl_1" and failed["passed"] is False
    assert [(c["name"], c.get("gpu_index")) for c in failed["checks"] if not c["ok"]] == [
        ("ecc_uncorrected", 1)]
    assert {"name": "dcgm", "ok": True, "skipped": True,
            "detail": "dcgmi not installed"} in failed["checks"]

    running.inject({"gpu": 1, "clear": True})
    time.sleep(0.5)
    running.portal.set_desired(running.node.node_id, validation={"id": "vl_2", "level": 1})
    passed = running.wait_for(lambda r: r["observed"].get("validation", {}).get("id") == "vl_2"
                              and "finished_at" in r["observed"]["validation"])
    assert passed["observed"]["validation"]["passed"] is True
    assert protocol.validate_report(passed) == [] and running.portal.rejected == []


def test_fake_faults_without_the_fake_nvml_is_a_config_error(tmp_path: Path) -> None:
    cfg = tmp_path / "agent.toml"
    cfg.write_text(f'[portal]\nurl = "http://127.0.0.1:9"\n[agent]\nstate_dir = '
                   f'"{tmp_path / "state"}"\n[hardware]\nsysfs_root = "{tmp_path}"\n'
                   f'access_root = "{tmp_path}"\nfake_faults = "{tmp_path / "f.jsonl"}"\n')
    proc = subprocess.run([sys.executable, "-m", "agents", "node", "--config", str(cfg)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "LD_LIBRARY_PATH": "/nonexistent"})
    assert proc.returncode == 2
    assert "fake_faults needs hardware.fake_gpus" in proc.stderr
