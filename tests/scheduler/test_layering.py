"""The core imports only the standard library (architecture: rooms and who may enter)."""

import ast
import sys
from pathlib import Path

import scheduler

ROOT = Path(scheduler.__file__).parent
FORBIDDEN = {"django", "rest_framework", "celery", "channels", "portal", "agents"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_scheduler_imports_only_stdlib_and_itself():
    files = sorted(ROOT.rglob("*.py"))
    assert files
    for path in files:
        for name in _imports(path):
            assert name not in FORBIDDEN, f"{path}: imports {name}"
            assert name == "scheduler" or name in sys.stdlib_module_names, f"{path}: {name}"


def test_public_api_is_exported():
    for name in ("Snapshot", "Request", "schedule_pass", "quote", "check_extension",
                 "Placement", "Unplaceable", "Reason", "get_policy"):
        assert name in scheduler.__all__
    assert scheduler.get_policy("bestfit").name == "bestfit"
    assert scheduler.get_policy().name == scheduler.DEFAULT_POLICY
