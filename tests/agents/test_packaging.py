"""``pip wheel --no-deps ./agents`` builds the agent wheel; it installs into a clean
virtualenv without Django and ``gpupool-agent`` runs from there on fake hardware."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*argv: str | Path, cwd: Path | None = None) -> str:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=600,
                          cwd=cwd)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.slow
def test_wheel_installs_without_django_and_runs(tmp_path: Path, node_exporter_sys: Path) -> None:
    wheels = tmp_path / "wheels"
    # built from a copy: setuptools builds in the source tree (agents/build/), and the
    # checkout under test stays as it was
    source = tmp_path / "src" / "agents"
    shutil.copytree(ROOT / "agents", source,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", source, "-w", wheels)
    [wheel] = wheels.glob("gpupool_agent-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "agents/cli.py" in names and "agents/doctor/__init__.py" in names
    assert not [n for n in names if n.startswith(("portal/", "scheduler/", "tests/"))]
    # the dependencies as wheels from the shared venv's pip cache / the registry
    _run(sys.executable, "-m", "pip", "download", "-q", "-d", wheels, wheel)
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv)
    py, agent = venv / "bin/python", venv / "bin/gpupool-agent"
    _run(py, "-m", "pip", "install", "-q", "--no-index", "--find-links", wheels, wheel)
    probe = subprocess.run([py, "-c", "import django"], capture_output=True, cwd=tmp_path)
    assert probe.returncode != 0, "Django must not be installed with the agent"
    assert "doctor" in _run(agent, "--help", cwd=tmp_path)
    assert "--once" in _run(agent, "node", "--help", cwd=tmp_path)
    out = _run(agent, "node", "--once", "--fake-gpus", "h100x8",
               "--sysfs-root", node_exporter_sys, "--proc-root", tmp_path, cwd=tmp_path)
    sample = json.loads(out)
    assert len(sample["gpus"]) == 8 and sample["ib_ports"]
