"""The previous release's code, from git history, for the upgrade tests (issue 31).

"Previous released" is the agent (and portal) of the last release. The repository has no
release tags (``git tag`` lists none), so the previous release is the last commit that
landed before this round of work: ``3857d6b`` (5 Dec 2026, the tip of ``main`` before the
healing, SSO, webhooks, packaging and bench-move merges). Every agent installed in the
field before this round runs that code; every migration after it is one an upgrade from
it applies. When releases get tags, point ``OLD_COMMIT`` at the last tag.

``extract(dest, *paths)`` writes ``git archive OLD_COMMIT <paths>`` into ``dest``; without
the git history (a shallow clone, a source tarball) the tests skip, or fail under
``REQUIRE_SERVICES=1`` (CI must see them run).
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OLD_COMMIT = "3857d6bbe14ef28e98a360395da9b4be5305eae8"


def _missing() -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{OLD_COMMIT}^{{commit}}"],
                              capture_output=True, timeout=30, check=False)
    except OSError as exc:
        return f"git not available: {exc}"
    if done.returncode != 0:
        return f"commit {OLD_COMMIT[:7]} not in this checkout's history (shallow clone?)"
    return None


def require_history() -> None:
    if (why := _missing()) is not None:
        if os.environ.get("REQUIRE_SERVICES") == "1":
            pytest.fail(f"REQUIRE_SERVICES=1 but: {why}", pytrace=False)
        pytest.skip(why)


def extract(dest: Path, *paths: str) -> Path:
    """``git archive OLD_COMMIT paths… | tar -x -C dest``; returns ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", OLD_COMMIT,
                              *paths], capture_output=True, timeout=120, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest
