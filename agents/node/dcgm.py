"""``dcgmi diag -r <level> -j`` for the validation run, through ``HostCommands``.

The JSON parsed is DCGM 4.x's (the format of NVIDIA/DCGM's own
``testing/python3/dcgm_diag_schema.json``, DCGM 4.0-4.2)::

    {"DCGM Diagnostic": {
        "test_categories": [{"category": "Hardware", "tests": [{
            "name": "memory",
            "results": [{"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0,
                         "status": "Fail",
                         "warnings": [{"warning": "…", "error_id": 83,
                                       "error_category": 1, "error_severity": 2}]}],
            "test_summary": {"status": "Fail"}}]}],
        "runtime_error": "…"},            (only when the diagnostic could not run)
     "entity_groups": […], "metadata": {"version": "4.2.3", "Driver Version Detected": "…"}}

DCGM 3.x wrote the same tree under ``"DCGM GPU Diagnostic"`` with per-GPU results keyed
``gpu_id``/``gpu_ids``; that is read too. A result ``Fail`` is a failed check (``Warn`` and
``Skip`` are not); a run past its time limit, an exit without JSON, or a
``runtime_error`` is a failed ``dcgm`` check. No dcgmi on PATH: one passing check marked
``skipped``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from typing import Any

from agents.host import TIMED_OUT, HostCommands

ROOTS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")
DETAIL_MAX = 512
NOT_INSTALLED = {"name": "dcgm", "ok": True, "skipped": True, "detail": "dcgmi not installed"}


def _check(ok: bool, detail: str, gpu: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": "dcgm", "ok": ok, "detail": detail[:DETAIL_MAX]}
    if isinstance(gpu, int) and not isinstance(gpu, bool) and 0 <= gpu <= 32767:
        out["gpu_index"] = gpu
    return out


class DcgmRunner:
    """Runs the diagnostic where ``which("dcgmi")`` finds it; ``timeout_s`` is what the
    host's commands are limited to (for the message: the host enforces it)."""

    def __init__(self, host: HostCommands, timeout_s: float,
                 which: Callable[[str], str | None] = shutil.which) -> None:  # fmt: skip
        self.host, self.timeout_s, self.which = host, timeout_s, which

    def run(self, level: int) -> list[dict[str, Any]]:
        dcgmi = self.which("dcgmi")
        if dcgmi is None:
            return [dict(NOT_INSTALLED)]
        result = self.host.run([dcgmi, "diag", "-r", str(level), "-j"])
        if result.returncode == TIMED_OUT:
            return [_check(False, f"dcgmi diag -r {level} timed out after "
                                  f"{self.timeout_s:g} s")]
        try:
            doc = json.loads(result.stdout[result.stdout.find("{"):])
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            return [_check(False, f"dcgmi diag -r {level}: exit {result.returncode}, no JSON: "
                                  f"{result.stderr.strip() or result.stdout.strip()}")]
        return parse_diag(doc, level)


def parse_diag(doc: dict[str, Any], level: int) -> list[dict[str, Any]]:
    """Checks from a parsed ``dcgmi diag -j`` document: one per failed result, else one
    passing check naming the DCGM version."""
    root = next((doc[k] for k in ROOTS if isinstance(doc.get(k), dict)), None)
    if root is None:
        return [_check(False, f"dcgmi diag -r {level}: unknown JSON (no {ROOTS[0]!r})")]
    if root.get("runtime_error"):
        return [_check(False, f"dcgmi diag -r {level}: {root['runtime_error']}")]
    failed = [_check(False, detail, gpu) for detail, gpu in _failures(root)]
    if failed:
        return failed
    version = (doc.get("metadata") or {}).get("version") or root.get("version") or "?"
    return [_check(True, f"dcgmi diag -r {level} passed (DCGM {version})")]


def _failures(root: dict[str, Any]) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for category in _list(root.get("test_categories")):
        for test in _list(category.get("tests")):
            name = str(test.get("name", "?"))
            for result in _list(test.get("results")):
                if str(result.get("status", "")).lower().startswith("fail"):
                    out.append((_detail(name, result), _entity(result)))
    return out


def _entity(result: dict[str, Any]) -> Any:
    if "entity_id" in result:
        return result["entity_id"] if result.get("entity_group", "GPU") == "GPU" else None
    gpu = result.get("gpu_id", result.get("gpu_ids"))
    return int(gpu) if isinstance(gpu, str) and gpu.isdigit() else gpu


def _detail(test: str, result: dict[str, Any]) -> str:
    warnings = [str(w.get("warning", "")) for w in _list(result.get("warnings"))]
    return f"{test}: {result.get('status')}" + (f": {'; '.join(warnings)}" if warnings else "")


def _list(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []
