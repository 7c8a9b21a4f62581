"""Metering killed mid-run (SIGKILL) and Redis flushed → rerun leaves complete, unique usage."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.db.models import Count

from portal.billing.models import UsageRecord
from portal.billing.pricing import hours
from tests.portal.billing.builders import make_lease
from tests.portal.factories import make_tenant

ROOT = Path(__file__).resolve().parents[3]
T0 = datetime(2026, 5, 1, 0, 30, tzinfo=UTC)
LEASES, HOURS = 40, 24
UNTIL = "2026-05-04T00:00:00Z"


def _flush_redis(db: int = 15) -> None:
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    host = url.split("//", 1)[1].split("/", 1)[0].split(":")[0]
    if shutil.which("redis-cli"):
        subprocess.run(["redis-cli", "-h", host, "-n", str(db), "FLUSHDB"], check=True,
                       capture_output=True)
    else:
        import redis

        redis.Redis(host=host, db=db).flushdb()


@pytest.mark.services("postgres", "redis")
@pytest.mark.django_db(transaction=True)
def test_killed_metering_recovers_complete_and_unique() -> None:
    tenant = make_tenant("crash")
    for i in range(LEASES):
        start = T0 + timedelta(minutes=i)
        make_lease(tenant, active_at=start, end_at=start + timedelta(hours=HOURS),
                   ended_at=start + timedelta(hours=HOURS))
    settings = connection.settings_dict
    env = {**os.environ, "REDIS_URL": "redis://127.0.0.1:6379/15",
           "DATABASE_URL": f"postgres://{settings['USER']}@{settings['HOST'] or '127.0.0.1'}:"
                           f"{settings['PORT'] or 5432}/{settings['NAME']}"}
    cmd = [sys.executable, "manage.py", "meter_usage", "--until", UNTIL]
    proc = subprocess.Popen([*cmd, "--pause", "0.2"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while UsageRecord.objects.count() < 3 * (HOURS + 1) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    partial = UsageRecord.objects.count()
    expected = sum(len(list(hours(T0 + timedelta(minutes=i), T0 + timedelta(minutes=i, hours=HOURS))))
                   for i in range(LEASES))
    assert 0 < partial < expected, "the kill must land mid-run"
    _flush_redis()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert UsageRecord.objects.count() == expected
    dupes = (UsageRecord.objects.values("lease_id", "period_start").annotate(n=Count("id"))
             .filter(n__gt=1))
    assert not dupes.exists()
    for lease_id in UsageRecord.objects.values_list("lease_id", flat=True).distinct():
        rows = UsageRecord.objects.filter(lease_id=lease_id)
        assert sum(r.seconds for r in rows) == HOURS * 3600 and all(r.closed for r in rows)
    again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert "created=0 updated=0 deleted=0" in again.stdout
