"""The layering table (shared/design/architecture.md, "Rooms and who may enter them") is
enforced by import-linter's contracts in `.importlinter`; these tests run them."""

from __future__ import annotations

import configparser
import io
import subprocess
import sys
import textwrap
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
AGENTS_THIRD_PARTY = {"pynvml", "httpx", "prometheus_client"}


def lint_imports(cwd: Path, config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(config)],
        cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
        env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"},
    )


def test_import_contracts_hold() -> None:
    result = lint_imports(ROOT, ROOT / ".importlinter")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_broken_contract_fails(tmp_path: Path) -> None:
    """The same kind of contract on a package that imports a framework is reported broken."""
    package = tmp_path / "purecore"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "engine.py").write_text("import json\nimport django  # noqa\n")
    config = tmp_path / "contracts.ini"
    config.write_text(textwrap.dedent("""\
        [importlinter]
        root_packages =
            purecore
        include_external_packages = True

        [importlinter:contract:pure]
        name = purecore is pure
        type = forbidden
        source_modules =
            purecore
        forbidden_modules =
            django
        """))
    result = lint_imports(tmp_path, config)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "purecore.engine -> django" in result.stdout


def _external_imports(package: str) -> dict[str, set[str]]:
    graph = grimp.build_graph(package, include_external_packages=True)
    found: dict[str, set[str]] = {}
    for module in graph.find_descendants(package) | {package}:
        for imported in graph.find_modules_directly_imported_by(module):
            root = imported.split(".")[0]
            if root != package and root not in sys.stdlib_module_names:
                found.setdefault(module, set()).add(root)
    return found


def test_agents_import_only_their_allowed_third_party_packages() -> None:
    """House rule 7: an agent host needs nothing but the stdlib, NVML, an HTTP client and
    the Prometheus client."""
    extra = {m: roots - AGENTS_THIRD_PARTY - (CLI_THIRD_PARTY if _is_cli(m) else set())
             for m, roots in _external_imports("agents").items()}
    assert {m: r for m, r in extra.items() if r} == {}


# The tenants' CLI (agents/gpupoolcli, ADR 0195) runs on laptops, not agent hosts: it may
# also use click, rich and PyYAML; no agent module imports it (so no host needs them).
CLI_THIRD_PARTY = {"click", "rich", "yaml"}


def _is_cli(module: str) -> bool:
    return module == "agents.gpupoolcli" or module.startswith("agents.gpupoolcli.")


def test_no_agent_module_imports_the_tenant_cli() -> None:
    graph = grimp.build_graph("agents")
    users = {m for m in graph.find_descendants("agents") | {"agents"} if not _is_cli(m)
             and any(_is_cli(i) for i in graph.find_modules_directly_imported_by(m))}
    assert users == set()


def test_exactly_one_module_imports_pynvml() -> None:
    users = sorted(m for m, roots in _external_imports("agents").items() if "pynvml" in roots)
    assert users == ["agents.nvml.binding"]


def test_scheduler_imports_only_the_standard_library() -> None:
    assert _external_imports("scheduler") == {}


def _contract_config(section: str, root: str, **options: str) -> str:
    """Our own contract ``section`` of `.importlinter` (its type and settings), aimed at
    ``root``: the test checks the contract as configured, not a copy of it."""
    ours = configparser.ConfigParser()
    ours.read(ROOT / ".importlinter")
    config = configparser.ConfigParser()
    lists = {key: f"\n{value}" for key, value in options.items()}  # one-a-line lists
    config["importlinter"] = {**ours["importlinter"], "root_packages": f"\n{root}"}
    config["importlinter:contract:under-test"] = {**ours[f"importlinter:contract:{section}"],
                                                  **lists}
    out = io.StringIO()
    config.write(out)
    return out.getvalue()


def _package(tmp_path: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        for parent in path.relative_to(tmp_path).parents:
            if parent != Path("."):
                (tmp_path / parent / "__init__.py").touch()


def _lint(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "contracts.ini"
    config.write_text(text)
    return lint_imports(tmp_path, config)


def test_the_no_cycle_contract_fails_on_a_cycle_across_depths(tmp_path: Path) -> None:
    """A circle between modules of different subpackages (core.x.a -> core.y.b -> core.x.c)
    breaks the no-cycle contract of scheduler/ and agents/."""
    _package(tmp_path, {"core/x/a.py": "import core.y.b\n",
                        "core/x/c.py": "",
                        "core/y/b.py": "import core.x.c\n",
                        "core/z.py": "import core.x.a\n"})
    text = _contract_config("scheduler-and-agents-acyclic", "core", ancestors="core")
    result = _lint(tmp_path, text)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "No cycles are allowed in core." in result.stdout
    assert "- .y -> .x (1 import)" in result.stdout
    (tmp_path / "core/y/b.py").write_text("")  # the circle broken: the contract holds
    assert _lint(tmp_path, text).returncode == 0


def test_a_cycle_behind_type_checking_is_a_cycle(tmp_path: Path) -> None:
    """The feasibility <-> services kind: one side imports the other only for type hints."""
    _package(tmp_path, {"core/services.py": "import core.feasibility\n",
                        "core/feasibility.py": textwrap.dedent("""\
                            from typing import TYPE_CHECKING
                            if TYPE_CHECKING:
                                import core.services
                            """)})
    result = _lint(tmp_path, _contract_config("portal-apps-acyclic", "core", ancestors="core"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "No cycles are allowed in core." in result.stdout


def test_the_core_importing_the_bench_is_refused(tmp_path: Path) -> None:
    _package(tmp_path, {"core/bench/fabric.py": "import core.engine\n",
                        "core/engine.py": "import core.bench.fabric\n"})
    text = _contract_config("core-never-imports-the-bench", "core",
                            protected_modules="core.bench", allowed_importers="core.bench")
    result = _lint(tmp_path, text)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "core.engine -> core.bench.fabric" in result.stdout
    (tmp_path / "core/engine.py").write_text("")
    assert _lint(tmp_path, text).returncode == 0


def test_no_benchmark_is_a_module_of_the_core_package() -> None:
    """Benchmarks and reference models live in scheduler/bench/ (ADR 0190), not beside the
    engine."""
    graph = grimp.build_graph("scheduler", cache_dir=None)
    core = {m for m in graph.find_children("scheduler") if m != "scheduler.bench"}
    leftovers = {m for m in core if m.rsplit(".", 1)[1] in
                 {"fabricbench", "fabricsweep", "fluidpool", "passbench", "gangwait", "replay"}}
    assert leftovers == set()
    assert "scheduler.bench.replay" in graph.modules
