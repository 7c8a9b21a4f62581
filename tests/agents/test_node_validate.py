"""The node agent's validation run (issue 27): passes on healthy fake hardware, fails on
each check that finds a fault, runs ``dcgmi diag`` through ``HostCommands``, and reaches
the portal in observed state right after it finishes."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agents import protocol
from agents.client.fakeportal import FakePortal
from agents.host import TIMED_OUT, CommandResult, FakeHost, HostCollector, write_fake_proc
from agents.node.dcgm import DcgmRunner, parse_diag
from agents.node.validate import Baseline, NodeValidator
from agents.nvml.collector import NvmlCollector
from agents.nvml.fake import FakeNvml
from agents.nvml.xid import XidWatcher
from agents.sysfs import faketree
from agents.sysfs.faketree import FakeSysfsWriter, gpu_node_hcas
from agents.sysfs.infiniband import InfinibandCollector
from agents.telemetry import Sampler, to_wire
from tests.agents.helpers import FakeClock, make_agent

REQUEST = {"id": "vl_1", "level": 1}


def _diag(status: str = "Pass", gpu: int = 0, warning: str = "") -> str:
    """A ``dcgmi diag -r 1 -j`` document in DCGM 4.x's shape (one GPU result)."""
    result: dict[str, Any] = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": gpu,
                              "status": status}
    if warning:
        result["warnings"] = [{"warning": warning, "error_id": 83, "error_category": 1,
                               "error_severity": 2}]
    return json.dumps({
        "DCGM Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [
            {"name": "software", "results": [result], "test_summary": {"status": status}}]}]},
        "entity_groups": [{"entity_group": "GPU", "entity_group_id": 1,
                           "entities": [{"entity_id": gpu, "device_id": "2330"}]}],
        "metadata": {"version": "4.2.3", "Driver Version Detected": "550.90.07"}})


class Node:
    def __init__(self, tmp: Path, answer: CommandResult | None = None,
                 dcgmi: str | None = None) -> None:  # fmt: skip
        self.sys = tmp / "sys"
        writer = FakeSysfsWriter(self.sys)
        for hca in gpu_node_hcas(1):
            writer.add(hca)
        write_fake_proc(tmp / "proc", "gpu-node-01")
        self.api = FakeNvml("h100x8", host="gpu-node-01")
        self.api.nvmlInit()
        self.nvml = NvmlCollector(self.api)
        self.sampler = Sampler(HostCollector(tmp / "proc"), InfinibandCollector(self.sys),
                               self.nvml)
        self.host = FakeHost(handlers=[lambda call: answer if call[1:2] == ("diag",) else None])
        dcgm = DcgmRunner(self.host, 5.0, which=lambda name: dcgmi)
        self.validator = NodeValidator(lambda: to_wire(self.sampler.snapshot()), dcgm)
        self.validator.baseline.observe(to_wire(self.sampler.sample()))  # as enrolled

    def run(self) -> dict[str, Any]:
        return {"id": "x", "level": 1, **_run(self.validator)}

    def failed(self) -> list[tuple[str, Any]]:
        result = self.run()
        assert result["passed"] is False
        return [(c["name"], c.get("gpu_index", c.get("device")))
                for c in result["checks"] if not c["ok"]]


def _run(validator: NodeValidator, request: dict[str, Any] | None = None) -> dict[str, Any]:
    assert validator.request(request or {"id": f"vl_{time.monotonic_ns()}", "level": 1})
    validator.wait(10)
    result = validator.result
    assert result is not None and "finished_at" in result
    return result


def test_validation_passes_on_healthy_fake_hardware(tmp_path: Path) -> None:
    result = Node(tmp_path).run()
    assert result["passed"] is True
    names = {c["name"] for c in result["checks"]}
    assert names == {"gpu_count", "gpu_lost", "gpu_healthy", "ecc_uncorrected",
                     "remap_pending", "remap_failure", "clocks_event_reasons",
                     "recovery_action", "power", "sm_clock", "port_state", "port_phys_state",
                     "port_rate", "dcgm"}
    assert sum(c.get("gpu_index") == 5 for c in result["checks"]) == 9  # each GPU checked
    assert result["checks"][-1] == {"name": "dcgm", "ok": True, "skipped": True,
                                    "detail": "dcgmi not installed"}


def test_fails_when_a_gpu_is_missing(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.api.gpus.pop()  # NVML now counts 7
    assert node.failed() == [("gpu_count", None)]


def test_fails_on_a_lost_gpu(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.api.lose(3)
    assert node.failed() == [("gpu_lost", 3)]


def _set(attr: str, value: Any) -> Callable[[Node], None]:
    return lambda node: setattr(node.api.gpus[2], attr, value)


FAULTS: list[tuple[str, Callable[[Node], None]]] = [
    ("gpu_healthy", lambda node: node.nvml.record_xid(node.api.gpus[2].uuid, 48)),
    ("ecc_uncorrected", _set("ecc_uncorrected", 1)),
    ("remap_pending", _set("remapped", (0, 1, 1, 0))),
    ("remap_failure", _set("remapped", (0, 1, 0, 1))),
    ("clocks_event_reasons", _set("clocks_event_reasons", 0x08)),  # HW slowdown
    ("recovery_action", _set("recovery_action", 1)),  # GPU reset
    ("power", _set("power_limit_mw", 80_000)),  # draws 90 W
    ("sm_clock", _set("sm_clock_override_mhz", 0)),
]


@pytest.mark.parametrize(("name", "fault"), FAULTS, ids=[n for n, _ in FAULTS])
def test_fails_on_each_gpu_check(tmp_path: Path, name: str,
                                 fault: Callable[[Node], None]) -> None:  # fmt: skip
    node = Node(tmp_path)
    fault(node)
    assert node.failed() == [(name, 2)]


@pytest.mark.parametrize(("name", "change"), [
    ("port_state", lambda root: faketree.set_port_state(root, "mlx5_0", 1, 2, 5)),
    ("port_phys_state", lambda root: faketree.set_port_state(root, "mlx5_0", 1, 4, 2)),
    ("port_rate", lambda root: faketree.set_rate(root, "mlx5_0", 1, 2, "NDR")),
])  # fmt: skip
def test_fails_on_each_port_check(tmp_path: Path, name: str,
                                  change: Callable[[Path], None]) -> None:  # fmt: skip
    node = Node(tmp_path)
    change(node.sys)
    assert node.failed() == [(name, "mlx5_0")]


def test_a_link_down_fails_state_and_phys_state(tmp_path: Path) -> None:
    node = Node(tmp_path)
    faketree.link_down(node.sys, "mlx5_0", 1)
    assert node.failed() == [("port_state", "mlx5_0"), ("port_phys_state", "mlx5_0")]
    faketree.link_up(node.sys, "mlx5_0", 1)
    assert node.run()["passed"] is True


def test_dcgmi_pass_is_run_through_host_commands(tmp_path: Path) -> None:
    node = Node(tmp_path, CommandResult(0, _diag("Pass")), dcgmi="/usr/bin/dcgmi")
    result = node.run()
    assert result["passed"] is True
    assert ("/usr/bin/dcgmi", "diag", "-r", "1", "-j") in node.host.calls
    assert result["checks"][-1] == {"name": "dcgm", "ok": True,
                                    "detail": "dcgmi diag -r 1 passed (DCGM 4.2.3)"}


def test_dcgmi_failure_names_the_test_and_gpu(tmp_path: Path) -> None:
    answer = CommandResult(226, _diag("Fail", gpu=4, warning="Persistence mode is disabled"))
    node = Node(tmp_path, answer, dcgmi="/usr/bin/dcgmi")
    result = node.run()
    assert result["passed"] is False
    assert [c for c in result["checks"] if not c["ok"]] == [
        {"name": "dcgm", "ok": False, "gpu_index": 4,
         "detail": "software: Fail: Persistence mode is disabled"}]


def test_dcgmi_timeout_fails_the_validation(tmp_path: Path) -> None:
    node = Node(tmp_path, CommandResult(TIMED_OUT, "", "timed out after 5 s"),
                dcgmi="/usr/bin/dcgmi")
    assert node.failed() == [("dcgm", None)]
    assert "timed out after 5 s" in node.run()["checks"][-1]["detail"]


def test_dcgmi_without_json_or_with_a_runtime_error_fails(tmp_path: Path) -> None:
    node = Node(tmp_path, CommandResult(1, "", "Error: unable to connect to host engine"),
                dcgmi="/usr/bin/dcgmi")
    assert "unable to connect" in node.run()["checks"][-1]["detail"]
    doc = {"DCGM Diagnostic": {"runtime_error": "The GPU is in use"}}
    assert parse_diag(doc, 2) == [{"name": "dcgm", "ok": False,
                                   "detail": "dcgmi diag -r 2: The GPU is in use"}]
    v3 = {"DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
        {"name": "GPU Memory", "results": [{"gpu_ids": "1", "status": "Fail"}]}]}]}}
    assert parse_diag(v3, 1)[0]["gpu_index"] == 1


def test_baseline_keeps_the_best_rate_and_count_seen(tmp_path: Path) -> None:
    baseline = Baseline()
    baseline.observe({"gpus": [{}] * 8, "ib_ports": [{"device": "mlx5_0", "port": 1,
                                                      "rate_gbps": 200.0}]})
    baseline.observe({"gpus": [{}] * 7, "ib_ports": [{"device": "mlx5_0", "port": 1,
                                                      "rate_gbps": 400.0}]})
    assert baseline.gpu_count == 8 and baseline.port_rates == {"mlx5_0/1": 400.0}


def test_one_run_per_id_and_a_new_id_replaces_the_result(tmp_path: Path) -> None:
    node = Node(tmp_path)
    first = _run(node.validator, {"id": "a", "level": 1})
    assert node.validator.request({"id": "a", "level": 1}) is False  # same id: not again
    node.api.gpus[0].ecc_uncorrected = 1
    second = _run(node.validator, {"id": "b", "level": 2})
    assert (first["id"], first["passed"]) == ("a", True)
    assert (second["id"], second["level"], second["passed"]) == ("b", 2, False)


def test_agent_runs_a_desired_validation_and_reports_it_at_once(tmp_path: Path) -> None:
    portal, clock = FakePortal(), FakeClock()
    agent, api, _ = make_agent(tmp_path, portal, clock, token=portal.issue_bootstrap_token())
    agent.applier.validator = NodeValidator(lambda: to_wire(agent.sampler.sample()), None)
    agent.validator = agent.applier.validator
    agent.validator.on_done = agent.wake.set
    agent.tick()  # enrols
    agent.tick()
    assert json.loads((tmp_path / "state" / "inventory.json").read_text())["gpus"]
    node = next(iter(portal.nodes.values()))
    api.gpus[6].recovery_action = 2
    portal.set_desired(node.node_id, validation=dict(REQUEST))
    assert agent.poll_desired(wait_s=0)
    agent.validator.wait(10)
    assert agent.wake.is_set()  # reported without waiting for the next regular report
    agent.tick()
    observed = node.reports[-1]["observed"]["validation"]
    assert (observed["id"], observed["level"], observed["passed"]) == ("vl_1", 1, False)
    assert [c["name"] for c in observed["checks"] if not c["ok"]] == ["recovery_action"]
    assert portal.rejected == [] and protocol.validate_report(node.reports[-1]) == []


@pytest.mark.parametrize(("validation", "field"), [
    ({"id": "", "level": 1}, "validation.id"),
    ({"id": "x" * 65, "level": 1}, "validation.id"),
    ({"id": "vl 1", "level": 1}, "validation.id"),
    ({"id": "vl_1", "level": 4}, "validation.level"),
    ({"id": "vl_1", "level": True}, "validation.level"),
    ({"level": 1}, "validation.id"),
    ("vl_1", "validation"),
])  # fmt: skip
def test_desired_validation_is_checked(validation: Any, field: str) -> None:
    desired = {"protocol": 1, "node_id": "nd_x", "generation": 1, "issued_at": "x",
               "validation": validation}
    assert field in [p["field"] for p in protocol.validate_desired_state(desired)]
    desired["validation"] = {"id": "vl_1.retry-2", "level": 3}
    assert protocol.validate_desired_state(desired) == []


def test_a_critical_xid_is_sampled_and_reported_at_once(tmp_path: Path) -> None:
    """Time to detect: a critical XID from the watcher's thread makes the next tick sample
    and send an urgent report, not wait for the regular sample and report."""
    portal, clock = FakePortal(), FakeClock()
    agent, api, _ = make_agent(tmp_path, portal, clock, token=portal.issue_bootstrap_token())
    agent.tick()
    agent.tick()
    node = next(iter(portal.nodes.values()))
    clock.advance(1.0)  # regular sample and report are 10 s apart
    assert agent.tick() > 5
    sent = len(node.reports)
    watcher = XidWatcher(api, agent.sampler.nvml, wait_ms=20)  # type: ignore[arg-type]
    watcher.start()
    watcher.on_critical = agent.xid_news
    agent.sampler.xid_source = watcher.drain
    try:
        api.inject_xid(5, 13)  # an application's fault: not news
        assert api.settle(5) and not agent.wake.is_set()
        api.inject_xid(5, 95)
        assert agent.wake.wait(5)
    finally:
        watcher.stop()
    agent.tick()
    assert len(node.reports) == sent + 1
    report = node.reports[-1]
    assert [e["xid"] for t in report["telemetry"] for e in t["xid_events"]] == [13, 95]
    assert report["seq"] in node.urgent_seqs
