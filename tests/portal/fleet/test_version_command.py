"""``manage.py version``: versions and schema state; ``--check`` fails on a stale schema."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder

from portal.fleet.protocol import PROTOCOL_VERSION

pytestmark = [pytest.mark.services("postgres"), pytest.mark.django_db(transaction=True)]


def test_up_to_date_schema() -> None:
    out = StringIO()
    call_command("version", "--check", stdout=out)
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
        call_command("version", stdout=out)
        assert f"fleet.{last.name}" in out.getvalue() and "1 unapplied" in out.getvalue()
        with pytest.raises(CommandError, match="unapplied"):
            call_command("version", "--check", stdout=StringIO())
    finally:
        recorder.record_applied("fleet", last.name)
