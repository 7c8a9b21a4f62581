"""The layering table of docs/architecture: who may import whom (AST scan, no imports run)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "scheduler": {"django", "rest_framework", "celery", "channels", "portal", "agents"},
    "agents": {"django", "rest_framework", "celery", "channels", "portal", "scheduler"},
    "portal": {"agents"},
}
# The portal reaches the scheduling core through one adapter only.
SCHEDULER_ADAPTERS = {"portal/leasing/allocation.py"}


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def violations() -> list[str]:
    found: list[str] = []
    for package, banned in FORBIDDEN.items():
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            bad = imported_roots(path) & banned
            if package == "portal" and rel not in SCHEDULER_ADAPTERS and "scheduler" in \
                    imported_roots(path):
                bad.add("scheduler (only portal/leasing/allocation.py may)")
            if bad:
                found.append(f"{rel}: {sorted(bad)}")
    return found


def test_layering_table_holds() -> None:
    assert violations() == []


def test_the_check_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "x.py"
    bad.write_text("from django.db import models\nimport portal.settings\n")
    assert imported_roots(bad) == {"django", "portal"}
