from __future__ import annotations

from pathlib import Path

import pytest

from agents.sysfs import ttar

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SYSFS_FIXTURES = FIXTURES / "sysfs"


def extract_tree(name: str, dest: Path) -> Path:
    """Extract a recorded ttar tree and return the directory playing /sys."""
    text = (SYSFS_FIXTURES / name).read_text()
    ttar.extract(text, dest)
    for candidate in (dest / "sys", dest / "fixtures" / "sys"):
        if candidate.is_dir():
            return candidate
    raise AssertionError(f"no sys/ in {name}")


@pytest.fixture
def node_exporter_sys(tmp_path: Path) -> Path:
    return extract_tree("node_exporter-infiniband.ttar", tmp_path)


@pytest.fixture
def procfs_sys(tmp_path: Path) -> Path:
    return extract_tree("procfs-infiniband.ttar", tmp_path)


@pytest.fixture(autouse=True)
def _fast_password_hashing() -> None:
    """Overrides tests/conftest.py's Django-only autouse fixture: agent tests run without
    Django (``-p no:django``) and must not need its ``settings`` fixture."""
