"""House rule 7: agents/ imports only stdlib, pynvml, httpx, prometheus_client;
exactly one module imports pynvml."""

import ast
import sys
from pathlib import Path

AGENTS = Path(__file__).resolve().parents[2] / "agents"
ALLOWED_THIRD_PARTY = {"pynvml", "httpx", "prometheus_client"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_agents_import_only_allowed_packages() -> None:
    bad = {}
    for path in AGENTS.rglob("*.py"):
        extra = {
            n
            for n in _imports(path)
            if n not in sys.stdlib_module_names and n not in ALLOWED_THIRD_PARTY and n != "agents"
        }
        if extra:
            bad[str(path)] = extra
    assert bad == {}


def test_exactly_one_module_imports_pynvml() -> None:
    users = [p.name for p in AGENTS.rglob("*.py") if "pynvml" in _imports(p)]
    assert users == ["binding.py"]
