"""Site overrides of the health policy: merge, refusal naming the key, the command."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from portal.fleet.policy import (
    Action,
    Kind,
    PolicyError,
    Severity,
    Signal,
    classify,
    default_table,
    load_file,
    loader,
    merge,
)

GOOD = """
rules:
  xid.31: {severity: fatal, action: reset_gpu, fence: true, cause: our apps never fault}
  xid.200: {action: reboot_node, severity: fatal, fence: true}
  ib_symbol_errors: {per_hour: 60}
  agent_silent: {fence: false}
guards:
  flap: {max_fences: 2}
  breaker: {max_share: 0.5, min_nodes: 3}
  retry: {max_attempts: 1}
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    return path


def test_merge_changes_only_the_fields_given(tmp_path: Path) -> None:
    table = load_file(_write(tmp_path, GOOD))
    default = default_table().rules
    row = table.rules["xid.31"]
    assert (row.severity, row.action, row.fence, row.cause, row.source) == (
        Severity.FATAL, Action.RESET_GPU, True, "our apps never fault", "site")
    assert table.rules["xid.200"].action is Action.REBOOT_NODE  # new XID, based on default
    assert table.rules["ib_symbol_errors"].params == {"per_hour": 60.0}
    assert table.rules["ib_symbol_errors"].action == default["ib_symbol_errors"].action
    assert not table.rules["agent_silent"].fence and default["agent_silent"].fence
    assert table.rules["xid.79"] == default["xid.79"]
    assert (table.guards.flap.max_fences, table.guards.flap.window_s) == (2, 86400.0)
    assert (table.guards.breaker.max_share, table.guards.breaker.min_nodes,
            table.guards.breaker.window_s) == (0.5, 3, 600.0)
    assert table.guards.retry.max_attempts == 1


def test_overridden_rules_decide(tmp_path: Path) -> None:
    table = load_file(_write(tmp_path, GOOD))
    xid31 = Signal(kind=Kind.XID, node="n1", value=31, gpu_index=0)
    assert classify(xid31).action is Action.RESTART_APP  # type: ignore[union-attr]
    assert classify(xid31, table).rule == "xid.31"  # type: ignore[union-attr]
    assert classify(xid31, table).fence  # type: ignore[union-attr]
    rate = Signal(kind=Kind.IB_SYMBOL_ERRORS, node="n1", value=90.0, port=("mlx5_0", 1))
    assert classify(rate) is None and classify(rate, table) is not None


def test_empty_file_is_the_defaults() -> None:
    assert merge(None) == default_table()
    assert merge({}).rules == default_table().rules


BAD = [
    ({"rulez": {}}, "rulez", "unknown section"),
    ([1, 2], "(file)", "mapping"),
    ({"rules": []}, "rules", "mapping"),
    ({"rules": {"xid.abc": {"fence": True}}}, "rules.xid.abc", "unknown rule"),
    ({"rules": {"xid.-1": {"fence": True}}}, "rules.xid.-1", "unknown rule"),
    ({"rules": {"gpu_on_fire": {"fence": True}}}, "rules.gpu_on_fire", "unknown rule"),
    ({"rules": {"xid.31": "reset"}}, "rules.xid.31", "mapping"),
    ({"rules": {"xid.31": {}}}, "rules.xid.31", "empty row"),
    ({"rules": {"xid.31": {"action": "bogus"}}}, "rules.xid.31.action", "must be one of"),
    ({"rules": {"xid.31": {"severity": "critical"}}}, "rules.xid.31.severity", "must be one of"),
    ({"rules": {"xid.31": {"scope": "rack"}}}, "rules.xid.31.scope", "must be one of"),
    ({"rules": {"xid.31": {"fence": "yes"}}}, "rules.xid.31.fence", "true or false"),
    ({"rules": {"xid.31": {"cause": ""}}}, "rules.xid.31.cause", "non-empty"),
    ({"rules": {"xid.31": {"per_hour": 5}}}, "rules.xid.31.per_hour", "unknown field"),
    ({"rules": {"ib_symbol_errors": {"per_hour": 0}}}, "rules.ib_symbol_errors.per_hour", "> 0"),
    ({"rules": {"ib_symbol_errors": {"per_hour": "many"}}}, "rules.ib_symbol_errors.per_hour", "> 0"),
    ({"guards": {"sentinel": {}}}, "guards.sentinel", "unknown guard"),
    ({"guards": {"flap": {"max_fence": 3}}}, "guards.flap.max_fence", "unknown parameter"),
    ({"guards": {"flap": {"max_fences": 2.5}}}, "guards.flap.max_fences", "integer"),
    ({"guards": {"retry": {"max_attempts": 0}}}, "guards.retry.max_attempts", "> 0"),
    ({"guards": {"breaker": {"max_share": 1.5}}}, "guards.breaker.max_share", "(0, 1]"),
    ({"guards": {"breaker": {"window_s": True}}}, "guards.breaker.window_s", "> 0"),
]


@pytest.mark.parametrize(("data", "field", "words"), BAD, ids=[b[1] for b in BAD])
def test_bad_file_refused_naming_the_key(data: object, field: str, words: str) -> None:
    with pytest.raises(PolicyError) as exc:
        merge(data)
    assert exc.value.field == field
    assert words in exc.value.message


def test_unreadable_and_invalid_yaml_refused(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read"):
        load_file(tmp_path / "missing.yaml")
    with pytest.raises(PolicyError, match="not valid YAML"):
        load_file(_write(tmp_path, "rules: {xid.31: [unclosed"))


def test_loader_follows_the_setting_and_the_file(tmp_path: Path, settings: object) -> None:
    settings.GPUPOOL_HEALTH_POLICY = ""  # type: ignore[attr-defined]
    assert loader.effective_table() is default_table()
    path = _write(tmp_path, GOOD)
    settings.GPUPOOL_HEALTH_POLICY = str(path)  # type: ignore[attr-defined]
    assert loader.effective_table().rules["xid.31"].source == "site"
    path.write_text("rules: {xid.31: {action: drain_replace}}")
    import os
    os.utime(path, (1, 1))  # a new modification time: re-read
    assert loader.effective_table().rules["xid.31"].action is Action.DRAIN_REPLACE
    path.write_text("rules: {xid.31: {action: nope}}")
    os.utime(path, (2, 2))
    with pytest.raises(PolicyError) as exc:
        loader.effective_table()
    assert exc.value.field == "rules.xid.31.action"


def _run(*args: str) -> str:
    out = StringIO()
    call_command("health_policy", *args, stdout=out)
    return out.getvalue()


def test_command_prints_the_effective_table(settings: object) -> None:
    settings.GPUPOOL_HEALTH_POLICY = ""  # type: ignore[attr-defined]
    text = _run()
    lines = text.splitlines()
    assert lines[0] == "# health policy: defaults"
    assert "max_fences=3" in lines[1] and "min_nodes=5" in lines[1]
    assert "xid.79\tfatal\treboot_node\tnode\tyes\t-\tnvidia-xid-catalogue" in text
    assert "ib_symbol_errors\tfatal\tcheck_link\tport\tyes\tper_hour=120\tdefault" in text
    assert len(lines) == 3 + len(default_table().rules)
    keys = [line.split("\t")[0] for line in lines[3:]]
    assert keys.index("xid.9") < keys.index("xid.10") < keys.index("xid.default")


def test_command_json_has_the_site_rows(tmp_path: Path, settings: object) -> None:
    settings.GPUPOOL_HEALTH_POLICY = str(_write(tmp_path, GOOD))  # type: ignore[attr-defined]
    data = json.loads(_run("--format", "json"))
    assert data["rules"]["xid.31"]["action"] == "reset_gpu"
    assert data["rules"]["xid.31"]["source"] == "site"
    assert data["guards"]["flap"]["max_fences"] == 2
    assert data["rules"]["ib_symbol_errors"]["params"] == {"per_hour": 60.0}


def test_command_check(tmp_path: Path) -> None:
    good = _write(tmp_path, GOOD)
    assert _run("--check", str(good)).strip() == f"ok: {good} (4 rules overridden)"
    good.write_text("rules: {ecc_dbe: {fence: maybe}}")
    with pytest.raises(CommandError) as exc:
        _run("--check", str(good))
    assert exc.value.returncode == 1
    assert "rules.ecc_dbe.fence: must be true or false" in str(exc.value)


def test_command_refuses_a_bad_configured_file(tmp_path: Path, settings: object) -> None:
    settings.GPUPOOL_HEALTH_POLICY = str(_write(tmp_path, "guards: {flap: {window_s: -1}}"))  # type: ignore[attr-defined]
    with pytest.raises(CommandError, match=r"guards\.flap\.window_s"):
        _run()
