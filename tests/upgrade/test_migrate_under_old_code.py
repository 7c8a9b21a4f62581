"""Issue 31, "upgrades without downtime": every migration since the previous release is
applied while the previous release's code keeps serving orders — 0 errors, 0 lost orders.

The old stack (``tests/upgrade/oldstack.py``): the previous release's ``manage.py
migrate`` makes the schema of that release; its uvicorn, Celery worker and beat serve the
API (in-database agents, so orders go all the way to active). Two client threads place
orders, list and release leases through the API all along. Then the CURRENT tree's
``manage.py migrate`` runs against the same database, and the load goes on a while on the
new schema (old code must live with the expanded schema until the web tier is replaced).

Asserted: migrate exits 0 and the current code sees the schema up to date (``manage.py
version --check``); every answer to the old code is 2xx or a clean 4xx (no 5xx, no
dropped connection) — before, during and after migrate; orders were acknowledged during
the migration itself; every acknowledged order exists afterwards; the old web and worker
logged no traceback; the stack's invariants hold.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from tests.portal.leasing.stack import ROOT, StackConfig, check_invariants
from tests.upgrade import oldtree
from tests.upgrade.load import OrderLoad
from tests.upgrade.oldstack import OldStack

pytestmark = [pytest.mark.services("postgres", "redis"), pytest.mark.slow]


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")
def test_every_migration_applies_while_old_code_serves_orders(tmp_path: Path) -> None:
    oldtree.require_history()
    old = oldtree.extract(tmp_path / "old")
    config = StackConfig(nodes=4, gpus_per_node=8, tenants=2, quota_gpus=16, max_pending=20,
                         workers=1, web_workers=1, reconcile_every_s=1.0)
    with OldStack(old, config) as stack:
        before = stack.manage(ROOT, "version")
        assert "unapplied migration" in before.stdout, before.stdout + before.stderr
        pending = [line.strip() for line in before.stdout.splitlines()
                   if line.startswith("  ")]
        loads = [OrderLoad(stack, tenant, seed=i) for i, tenant in enumerate(stack.keys)]
        for load in loads:
            load.start()
        try:
            time.sleep(3)  # the old code serving on its own schema
            began = time.time()
            migrate = stack.manage(ROOT, "migrate", "--no-input")
            ended = time.time()
            time.sleep(5)  # old code on the new schema
        finally:
            for load in loads:
                load.stop.set()
            for load in loads:
                load.join(60)
        assert migrate.returncode == 0, migrate.stdout[-3000:] + migrate.stderr[-3000:]
        after = stack.manage(ROOT, "version", "--check")
        assert after.returncode == 0 and "schema: up to date" in after.stdout, after.stdout

        answers = [a for load in loads for a in load.answers]
        errors = [a for load in loads for a in load.errors()]
        acked = [lease for load in loads for _, lease in load.acked]
        during = [lease for load in loads for at, lease in load.acked if began <= at <= ended]
        print(f"{len(pending)} migrations in {ended - began:.1f} s under load; "
              f"{len(answers)} requests, {len(acked)} orders acknowledged "
              f"({len(during)} during migrate), {len(errors)} errors")
        assert not errors, errors[:10]
        assert during, "no order was acknowledged while migrate ran: the test proves nothing"
        stored = stack.states(acked)
        lost = sorted(set(acked) - set(stored))
        assert not lost, f"{len(lost)} acknowledged orders lost: {lost[:10]}"
        logs = stack.errors()
        assert "Traceback" not in logs, logs[-6000:]
        stack.wait_settled(timeout=60)
        assert not check_invariants(stack), check_invariants(stack)
