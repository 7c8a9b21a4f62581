"""Issue 12's findings, one test each: the wire protocol has one home (``agents.protocol``),
the agent checks with the portal's bounds, the error codes are one table, the fake
portal imitates bindings, approval and 429 (the full comparison with the real portal is
tests/agents/test_protocol_contract.py)."""

from __future__ import annotations

import ast
import copy
import re
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from agents import protocol
from agents.client.fakeportal import FakePortal

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "agents" / "protocol"


def _report() -> dict[str, Any]:
    return {"protocol": 1, "node_id": "nd_1", "seq": 1,
            "created_at": "2026-12-01T10:00:00+00:00", "agent_version": "0.1.0",
            "dropped_reports": 0, "observed": {"generation_applied": 0},
            "telemetry": [{"ts": 1.0, "host": {"hostname": "h"},
                           "gpus": [{"index": 0, "healthy": True}],
                           "ib_ports": [{"device": "mlx5_0", "port": 1, "counters": {"x": 1},
                                         "saturated": []}]}]}


# --- finding: the protocol existed twice (agents/protocol.py, portal/fleet/protocol.py) ---
def _defined_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def test_the_wire_protocol_has_one_home() -> None:
    from portal.fleet import protocol as portal_side

    assert not (ROOT / "portal" / "fleet" / "schema.py").exists()
    for name in ("ENROL", "REPORT", "CREDENTIAL", "DESIRED_QUERY", "ERROR_CODES",
                 "PROTOCOL_VERSION", "validate_report", "validate_enrol",
                 "validate_desired_state", "error_body", "schema"):
        assert getattr(portal_side, name) is getattr(protocol, name), name
    # the portal's door defines nothing of its own (only __all__)
    assert _defined_names(ROOT / "portal" / "fleet" / "protocol.py") == {"__all__"}
    # (portal/core/api/errors.py's error_body is the REST API's, not the agent protocol's)
    shared = {"PROTOCOL_VERSION", "ERROR_CODES", "validate_report", "validate_enrol",
              "validate_desired_state", "Problem", "Spec", "ENROL", "REPORT"}
    for path in [*(ROOT / "portal").rglob("*.py"), *(ROOT / "agents").rglob("*.py")]:
        if PACKAGE in path.parents or ROOT / "agents" / "build" in path.parents:
            continue  # (agents/build: the copy `pip wheel ./agents` leaves, not a source)
        assert not _defined_names(path) & shared, path


def test_the_protocol_package_imports_only_the_standard_library() -> None:
    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                ok = module.split(".")[0] in sys.stdlib_module_names or \
                    module == "agents.protocol" or module.startswith("agents.protocol.")
                assert ok, f"{path.name} imports {module}"


def test_portal_imports_agents_only_through_its_protocol_door() -> None:
    import grimp

    graph = grimp.build_graph("portal", "agents")
    importers = {(m, imported) for m in graph.find_descendants("portal") | {"portal"}
                 for imported in graph.find_modules_directly_imported_by(m)
                 if imported.split(".")[0] == "agents"}
    assert {m for m, _ in importers} == {"portal.fleet.protocol"}
    assert all(i == "agents.protocol" or i.startswith("agents.protocol.") for _, i in importers)


# --- finding: the agent's validator lacked the portal's storage bounds -------------------
@pytest.mark.parametrize(("edit", "field"), [
    (lambda r: r["telemetry"][0]["gpus"][0].update(index=40_000), "telemetry[0].gpus[0].index"),
    (lambda r: r.update(seq=2**63), "seq"),
    (lambda r: r.update(created_at="x" * 65), "created_at"),
    (lambda r: r["telemetry"][0]["host"].update(hostname="h" * 254),
     "telemetry[0].host.hostname"),
    (lambda r: r["telemetry"][0]["ib_ports"][0]["counters"].update(x=2**64),
     "telemetry[0].ib_ports[0].counters.x"),
    (lambda r: r["telemetry"][0].update(ts=5e9), "telemetry[0].ts"),
    (lambda r: r["telemetry"][0]["gpus"][0].update(temperature_c=1e6),
     "telemetry[0].gpus[0].temperature_c"),
    (lambda r: r["observed"].update(apply_errors=[{}] * 10_001), "observed.apply_errors"),
])
def test_an_agent_cannot_build_a_report_the_portal_refuses(edit: Any, field: str) -> None:
    from portal.fleet import protocol as portal_side

    body = copy.deepcopy(_report())
    edit(body)
    agent_problems = protocol.validate_report(body)
    assert field in {p["field"] for p in agent_problems}
    assert agent_problems == portal_side.validate_report(body)


def test_an_agent_cannot_enrol_with_a_body_the_portal_refuses() -> None:
    body = {"protocol": 1, "bootstrap_token": "t" * 129, "role": "node",
            "hostname": "not a host", "agent_version": "1",
            "inventory": {"gpus": [{"index": 0}, {"index": 0}]}}
    assert {p["field"] for p in protocol.validate_enrol(body)} == {
        "bootstrap_token", "hostname", "inventory.gpus[1].index"}


# --- finding: the two copies' error codes differed ---------------------------------------
def test_every_error_code_the_portal_raises_is_in_the_shared_table() -> None:
    raised: set[str] = set()
    for path in (ROOT / "portal" / "fleet").rglob("*.py"):
        raised |= set(re.findall(r'AgentError\(\s*"([a-z_]+)"', path.read_text()))
    assert raised and raised <= set(protocol.ERROR_CODES)
    assert {protocol.ERROR_CODES[c] for c in protocol.RETRY_AFTER_CODES} == {409, 429}


# --- finding: the fake portal lacked bindings, approval and 429 ----------------------------
def _enrol(portal: FakePortal, token: str, hostname: str = "gpu-node-01",
           role: str = "node") -> httpx.Response:
    with httpx.Client(transport=portal.transport(), base_url="http://fake") as client:
        return client.post(protocol.ENROL_PATH, json={
            "protocol": 1, "bootstrap_token": token, "role": role, "hostname": hostname,
            "agent_version": "0.1.0"})


def test_fake_portal_refuses_a_host_outside_the_token_binding() -> None:
    portal = FakePortal()
    token = portal.issue_bootstrap_token(hostname="gpu-node-0*", role="node")
    refused = _enrol(portal, token, hostname="storage-01")
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "enrolment_refused"
    assert refused.json()["error"]["details"][0]["field"] == "hostname"
    assert _enrol(portal, token, role="fabric").json()["error"]["details"][0]["field"] == "role"
    assert _enrol(portal, token).status_code == 201  # not consumed by the refusals


def test_fake_portal_holds_a_takeover_for_approval() -> None:
    portal = FakePortal()
    assert _enrol(portal, portal.issue_bootstrap_token()).status_code == 201
    token = portal.issue_bootstrap_token()
    held = _enrol(portal, token)
    assert held.status_code == 409 and held.json()["error"]["code"] == "pending_approval"
    assert held.headers[protocol.RETRY_AFTER_HEADER] == str(portal.pending_retry_s)
    portal.decide_enrolment("gpu-node-01", approve=True)
    assert _enrol(portal, token).status_code == 201
    assert len(portal.nodes) == 1  # the old identity is replaced


def test_fake_portal_answers_429_with_retry_after() -> None:
    now = [1000.0]
    portal = FakePortal(clock=lambda: now[0])
    portal.rate_limit = {"rate_per_s": 20, "burst": 200, "enrol_rate_per_s": 0.1,
                         "enrol_burst": 2}
    codes = [_enrol(portal, "gpb_unknown").status_code for _ in range(3)]
    assert codes == [401, 401, 429]
    limited = _enrol(portal, "gpb_unknown")
    assert limited.json()["error"]["code"] == "rate_limited"
    assert limited.headers[protocol.RETRY_AFTER_HEADER] == "10"
    now[0] += 10
    assert _enrol(portal, "gpb_unknown").status_code == 401  # a token is free again
