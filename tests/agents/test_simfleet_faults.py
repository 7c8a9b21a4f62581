"""``agents.sim.fleet --control``: faults injected into a running simulated fleet show in
what the portal receives, in the real agent's shape, at once (issue 27)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents import protocol
from agents.client.fakeportal import FakeNode, FakePortal, serve
from agents.sim.faults import NodeFaults
from agents.sim.fleet import amain, parser_for_tests
from agents.sim.node import SimNode, telemetry_template


class Driver:
    """The operator side, in a thread while the fleet runs: inject, then watch."""

    def __init__(self, portal: FakePortal, control: Path, count: int) -> None:
        self.portal, self.control, self.count = portal, control, count
        self.seen: dict[str, Any] = {}
        self.error: BaseException | None = None

    def node(self, hostname: str) -> FakeNode:
        return self.portal.node_by_hostname(hostname)

    def inject(self, **line: Any) -> float:
        with self.control.open("a") as f:
            f.write(json.dumps(line) + "\n")
        return time.time()

    def wait(self, hostname: str, what: Callable[[dict[str, Any]], bool],
             timeout: float = 5.0) -> dict[str, Any] | None:  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            hit = next((r for r in self.node(hostname).reports if what(r)), None)
            if hit is not None:
                return hit
            time.sleep(0.02)
        return None

    def run(self) -> None:
        try:
            self._steps()
        except BaseException as exc:  # handed to the test
            self.error = exc

    def _steps(self) -> None:
        while len(self.portal.nodes) < self.count:
            time.sleep(0.02)
        time.sleep(0.3)
        a, b, c = "sim-node-00001", "sim-node-00002", "sim-node-00003"
        at = self.inject(host=a, gpu=3, xid=79)
        hit = self.wait(a, lambda r: 79 in _xids(r))
        self.seen["xid"] = (hit, at)
        at = self.inject(host=b, port_down=["mlx5_0", 1])
        self.seen["port"] = (self.wait(b, lambda r: _port(r)["state_id"] == 1), at)
        self.inject(host=c, silent=True)
        time.sleep(0.3)
        silenced_at = len(self.node(c).reports)
        generation = self.portal.set_desired(self.node(c).node_id, partitions=[])
        time.sleep(1.2)  # heartbeats are 0.5 s apart: a live node would have sent two
        self.seen["silent"] = (len(self.node(c).reports) - silenced_at,
                               any(r["observed"]["generation_applied"] == generation
                                   for r in self.node(c).reports))
        self.inject(host=c, silent=False)
        self.seen["back"] = self.wait(
            c, lambda r: r["observed"]["generation_applied"] == generation)
        self.portal.set_desired(self.node(b).node_id, validation={"id": "vl_b", "level": 1})
        self.seen["validation_b"] = self.wait(b, lambda r: "validation" in r["observed"])
        self.inject(host=a, clear=True)
        self.seen["cleared"] = self.wait(a, lambda r: r["telemetry"][0]["gpus"][3].get(
            "healthy") is True and r["seq"] > hit["seq"]) if hit else None
        self.portal.set_desired(self.node(a).node_id, validation={"id": "vl_a", "level": 2})
        self.seen["validation_a"] = self.wait(a, lambda r: "validation" in r["observed"])
        self.inject(host="nobody", gpu=1, xid=13)
        self.inject(host=a, gpu=42, xid=13)


def _xids(report: dict[str, Any]) -> list[int]:
    return [e["xid"] for t in report["telemetry"] for e in t.get("xid_events", [])]


def _port(report: dict[str, Any]) -> dict[str, Any]:
    return dict(report["telemetry"][0]["ib_ports"][0])


def _failed(report: dict[str, Any] | None) -> list[str]:
    assert report is not None
    return [c["name"] for c in report["observed"]["validation"]["checks"] if not c["ok"]]


def test_injected_faults_reach_the_portal_in_the_agents_shape(tmp_path: Path) -> None:
    portal = FakePortal()
    server = serve(portal)
    count = 3
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("\n".join(portal.issue_bootstrap_token() for _ in range(count)))
    control = tmp_path / "control.jsonl"
    host, port = server.server_address[:2]
    args = parser_for_tests().parse_args([
        "--portal", f"http://{host}:{port}", "--nodes", str(count), "--tokens-file",
        str(tokens), "--report-interval", "0.5", "--long-poll", "2", "--apply-delay", "0.01",
        "--duration", "9", "--control", str(control)])
    driver = Driver(portal, control, count)
    thread = threading.Thread(target=driver.run, daemon=True)
    thread.start()
    try:
        summary = asyncio.run(amain(args))
    finally:
        server.shutdown()
    thread.join(5)
    assert driver.error is None, driver.error
    s = driver.seen

    hit, at = s["xid"]
    assert hit is not None, "the XID never reached the portal"
    assert datetime_ts(hit) - at < 1.0  # reported at once (heartbeats are 0.5 s apart)
    gpu = hit["telemetry"][0]["gpus"][3]
    assert (gpu["last_xid"], gpu["healthy"], gpu["lost"]) == (79, False, True)
    assert hit["telemetry"][0]["xid_events"][0]["gpu_uuid"] == gpu["uuid"]

    down, at = s["port"]
    assert down is not None and datetime_ts(down) - at < 1.0
    assert (_port(down)["phys_state_id"], _port(down)["counters"]["link_downed"]) == (3, 1)

    assert s["silent"] == (0, False)  # no report, no long-poll (the change never applied)
    assert s["back"] is not None  # long-polls again and reports once back

    assert s["validation_b"]["observed"]["validation"]["passed"] is False
    assert _failed(s["validation_b"]) == ["port_state", "port_phys_state"]
    assert s["cleared"] is not None
    validation_a = s["validation_a"]["observed"]["validation"]
    assert (validation_a["id"], validation_a["level"], validation_a["passed"]) == (
        "vl_a", 2, True)

    assert portal.rejected == []
    assert summary["faults_applied"] == 5 and summary["faults_skipped"] == 2
    assert summary["fault_reports"] >= 4


def datetime_ts(report: dict[str, Any]) -> float:
    return float(report["telemetry"][0]["ts"])


def test_sim_node_with_faults_reports_valid_bodies_and_drains_xids_once() -> None:
    template = telemetry_template("h100x8")
    node = SimNode.build(1, "n1", "t", None, template, "1")
    node.node_id = "nd_x"
    faults: NodeFaults = node.faults
    faults.apply({"host": "n1", "gpu": 1, "ecc_dbe": 2}, node.gpu_uuids, 1.0)
    faults.apply({"host": "n1", "gpu": 2, "remap": "failure"}, node.gpu_uuids, 1.0)
    faults.apply({"host": "n1", "gpu": 0, "xid": 48}, node.gpu_uuids, 1.0)
    report = node.report(time.time())
    assert protocol.validate_report(report) == []
    gpus = report["telemetry"][0]["gpus"]
    assert gpus[1]["ecc_uncorrected_volatile"] == 2 and gpus[2]["remapped_rows_failure"]
    assert gpus[0]["unhealthy_reasons"] == ["xid 48"]
    assert _xids(report) == [48] and _xids(node.report(time.time())) == []
    node.validate({"id": "v", "level": 1}, time.time())
    assert node.validation is not None
    assert [(c["name"], c.get("gpu_index")) for c in node.validation["checks"]
            if not c["ok"]] == [("gpu_healthy", 0), ("ecc_uncorrected", 1),
                                ("remap_failure", 2)]
