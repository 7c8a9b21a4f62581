"""``manage.py version``: versions and schema state; ``--check`` fails on a stale schema."""

from __future__ import annotations

import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder

from portal.fleet.protocol import PROTOCOL_VERSION

ROOT = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.services("postgres"), pytest.mark.django_db(transaction=True)]


def test_up_to_date_schema() -> None:
    out = StringIO()
    call_command("gpupool_version", "--check", stdout=out)
    text = out.getvalue()
    assert "gpupool 0.1.0" in text and f"agent protocol {PROTOCOL_VERSION}" in text
    assert "schema: up to date" in text


def test_unapplied_migration_is_listed_and_check_fails() -> None:
    recorder = MigrationRecorder(connection)
    last = recorder.migration_qs.filter(app="fleet").order_by("-id").first()
    assert last is not None
    last.delete()  # the schema now looks one fleet migration behind
    try:
        out = StringIO()
        call_command("gpupool_version", stdout=out)
        assert f"fleet.{last.name}" in out.getvalue() and "1 unapplied" in out.getvalue()
        with pytest.raises(CommandError, match="unapplied"):
            call_command("gpupool_version", "--check", stdout=StringIO())
    finally:
        recorder.record_applied("fleet", last.name)


def _manage_version(*args: str) -> subprocess.CompletedProcess[str]:
    """``manage.py version`` as a unit runs it (a process, this test database)."""
    db = connection.settings_dict
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    url = f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "portal.settings"}
    return subprocess.run([sys.executable, "manage.py", "version", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_manage_py_version_is_ours_not_djangos() -> None:
    """Django's ManagementUtility answers ``version`` itself (its own version, exit 0):
    manage.py routes it to gpupool_version, so a unit's ``version --check`` really checks."""
    ok = _manage_version("--check")
    assert ok.returncode == 0 and "schema: up to date" in ok.stdout, ok.stdout + ok.stderr
    recorder = MigrationRecorder(connection)
    last = recorder.migration_qs.filter(app="fleet").order_by("-id").first()
    assert last is not None
    last.delete()
    try:
        stale = _manage_version("--check")
        assert stale.returncode == 1, stale.stdout + stale.stderr
        assert f"fleet.{last.name}" in stale.stdout
    finally:
        recorder.record_applied("fleet", last.name)
