"""The health policy's table: every catalogue row, every signal kind, the named XIDs."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from portal.fleet.policy import Action, Kind, Scope, Severity, Signal, classify, default_table
from portal.fleet.policy.catalogue import CATALOGUE

# The spec: NVIDIA's bucket → (action, severity when fatal / non-fatal). Written out here
# independently of catalogue.py so a changed mapping fails.
EXPECTED_BUCKET = {
    "IGNORE": "none", "FOLLOW_OTHER_XID": "none", "WORKFLOW_XID_45": "none",
    "RESTART_APP": "restart_app", "CHECK_UVM": "restart_app", "RESET_GPU": "reset_gpu",
    "WORKFLOW_XID_48": "reset_gpu", "WORKFLOW_NVLINK_ERR": "reset_gpu",
    "WORKFLOW_NVLINK5_ERR": "reset_gpu", "RESTART_BM": "reboot_node",
    "RESTART_VM": "reboot_node", "CHECK_MECHANICALS": "drain_replace",
    "UPDATE_SWFW": "update_software", "UNEXPECTED_ERR_REPORT_ISSUE": "contact_support",
}


def _catalogue() -> list[dict[str, str]]:
    lines = [line for line in Path(CATALOGUE).read_text().splitlines() if not line.startswith("#")]
    return list(csv.DictReader(lines))


ROWS = _catalogue()


def test_catalogue_is_nvidias_table_with_its_source_named() -> None:
    text = Path(CATALOGUE).read_text()
    assert "NVIDIA/NVSentinel" in text and "Apache License 2.0" in text
    assert [int(r["xid"]) for r in ROWS] == list(range(1, 163))


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"xid{r['xid']}")
def test_every_catalogue_row(row: dict[str, str]) -> None:
    verdict = classify(Signal(kind=Kind.XID, node="n1", value=int(row["xid"]), gpu_index=2))
    assert verdict is not None
    bucket, fatal = row["resolution_bucket"], row["fatal"] == "true"
    severity = "info" if bucket in {"IGNORE", "FOLLOW_OTHER_XID"} else \
        "fatal" if fatal else "warning"
    assert (verdict.action, verdict.severity, verdict.fence, verdict.scope, verdict.rule) == (
        EXPECTED_BUCKET[bucket], severity, severity == "fatal",
        "node" if EXPECTED_BUCKET[bucket] == "reboot_node" else "gpu", f"xid.{row['xid']}")
    assert f"xid {row['xid']} on GPU 2 of n1" in verdict.cause


@pytest.mark.parametrize(("xid", "action", "severity", "fence"), [
    (48, Action.RESET_GPU, Severity.FATAL, True),  # ECC DBE
    (64, Action.RESET_GPU, Severity.FATAL, True),
    (74, Action.RESET_GPU, Severity.FATAL, True),  # NVLink
    (79, Action.REBOOT_NODE, Severity.FATAL, True),  # fallen off the bus
    (94, Action.RESTART_APP, Severity.WARNING, False),  # contained: the application only
    (95, Action.RESET_GPU, Severity.FATAL, True),
    (119, Action.RESET_GPU, Severity.FATAL, True),
    (120, Action.RESET_GPU, Severity.FATAL, True),
    (63, Action.NONE, Severity.INFO, False),
    (92, Action.NONE, Severity.INFO, False),
])
def test_named_xids(xid: int, action: Action, severity: Severity, fence: bool) -> None:
    verdict = classify(Signal(kind=Kind.XID, node="n1", value=xid, gpu_index=0))
    assert verdict is not None
    assert (verdict.action, verdict.severity, verdict.fence) == (action, severity, fence)


@pytest.mark.parametrize("xid", [0, 163, 9999, "garbled", None])
def test_unknown_xid_gets_the_documented_default(xid: object) -> None:
    verdict = classify(Signal(kind=Kind.XID, node="n1", value=xid, gpu_index=0))  # type: ignore[arg-type]
    assert verdict is not None and verdict.rule == "xid.default"
    assert (verdict.severity, verdict.action, verdict.fence) == (
        Severity.WARNING, Action.CONTACT_SUPPORT, False)
    assert f"xid {xid}" in verdict.cause


SIGNAL_EXPECTED = [
    (Kind.GPU_LOST, True, "gpu_lost", Severity.FATAL, Action.REBOOT_NODE, Scope.NODE, True),
    (Kind.ECC_DBE, 2, "ecc_dbe", Severity.FATAL, Action.RESET_GPU, Scope.GPU, True),
    (Kind.REMAP_PENDING, True, "remap_pending", Severity.WARNING, Action.RESET_GPU, Scope.GPU, False),
    (Kind.REMAP_FAILURE, True, "remap_failure", Severity.FATAL, Action.RMA, Scope.GPU, True),
    (Kind.THERMAL, 0x40, "thermal", Severity.WARNING, Action.CHECK_NODE, Scope.GPU, False),
    (Kind.POWER_BRAKE, 0x80, "power_brake", Severity.WARNING, Action.CHECK_NODE, Scope.GPU, False),
    (Kind.RECOVERY_ACTION, 0, "recovery_action.0", Severity.INFO, Action.NONE, Scope.GPU, False),
    (Kind.RECOVERY_ACTION, 1, "recovery_action.1", Severity.FATAL, Action.RESET_GPU, Scope.GPU, True),
    (Kind.RECOVERY_ACTION, 2, "recovery_action.2", Severity.FATAL, Action.REBOOT_NODE, Scope.NODE, True),
    (Kind.RECOVERY_ACTION, 3, "recovery_action.3", Severity.WARNING, Action.RESTART_APP, Scope.GPU, False),
    (Kind.RECOVERY_ACTION, 4, "recovery_action.4", Severity.WARNING, Action.RESET_GPU, Scope.GPU, False),
    (Kind.RECOVERY_ACTION, 5, "recovery_action.5", Severity.FATAL, Action.RESET_GPU, Scope.GPU, True),
    (Kind.RECOVERY_ACTION, 77, "recovery_action.default", Severity.WARNING, Action.CONTACT_SUPPORT, Scope.GPU, False),
    (Kind.IB_PORT_DOWN, "DOWN/Polling", "ib_port_down", Severity.FATAL, Action.CHECK_LINK, Scope.PORT, True),
    (Kind.IB_PORT_UP, "ACTIVE/LinkUp", "ib_port_up", Severity.INFO, Action.NONE, Scope.PORT, False),
    (Kind.IB_LINK_DOWNED, 1, "ib_link_downed", Severity.FATAL, Action.CHECK_LINK, Scope.PORT, True),
    (Kind.IB_SYMBOL_ERRORS, 121.0, "ib_symbol_errors", Severity.FATAL, Action.CHECK_LINK, Scope.PORT, True),
    (Kind.AGENT_SILENT, 45.0, "agent_silent", Severity.FATAL, Action.CHECK_NODE, Scope.NODE, True),
]


@pytest.mark.parametrize(("kind", "value", "rule", "severity", "action", "scope", "fence"),
                         SIGNAL_EXPECTED, ids=lambda v: str(v))
def test_every_signal_kind(kind: Kind, value: object, rule: str, severity: Severity,
                           action: Action, scope: Scope, fence: bool) -> None:
    port = ("mlx5_0", 1) if scope is Scope.PORT else None
    gpu = 3 if scope is Scope.GPU else None
    verdict = classify(Signal(kind=kind, node="node-017", value=value, gpu_index=gpu,  # type: ignore[arg-type]
                              port=port))
    assert verdict is not None
    assert (verdict.rule, verdict.severity, verdict.action, verdict.scope, verdict.fence) == (
        rule, severity, action, scope, fence)
    assert str(kind) in verdict.cause and "node-017" in verdict.cause


def test_every_kind_has_a_row() -> None:
    covered = {kind for kind, *_ in SIGNAL_EXPECTED}
    assert covered | {Kind.XID} == set(Kind)
    rules = default_table().rules
    assert all(str(k) in rules or f"{k}.default" in rules for k in Kind)


@pytest.mark.parametrize(("rate", "fires"), [(120.0, False), (119.0, False), (120.5, True),
                                             (3600.0, True)])
def test_symbol_errors_judged_against_the_ber_limit(rate: float, fires: bool) -> None:
    verdict = classify(Signal(kind=Kind.IB_SYMBOL_ERRORS, node="n1", value=rate,
                              port=("mlx5_0", 1)))
    assert (verdict is not None) is fires
    if verdict:
        assert "/h > 120/h" in verdict.cause


def test_policy_package_is_pure() -> None:
    """No database and no settings but in the loader (import-linter cannot forbid a
    subpackage of django; ``.importlinter`` forbids models, services and other apps)."""
    import ast

    package = Path(CATALOGUE).parent
    for module in package.glob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
            elif isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
        assert not {n for n in names if n.startswith("django.db")}, module.name
        if module.name != "loader.py":
            assert not {n for n in names if n.startswith("django")}, module.name


def test_cause_names_the_value_but_not_a_flag() -> None:
    downed = classify(Signal(kind=Kind.IB_LINK_DOWNED, node="n1", value=1, port=("mlx5_0", 1)))
    assert downed is not None and "mlx5_0 port 1 of n1 (1):" in downed.cause
    lost = classify(Signal(kind=Kind.GPU_LOST, node="n1", value=True, gpu_index=4))
    assert lost is not None and lost.cause.startswith("gpu_lost on GPU 4 of n1: NVML")
