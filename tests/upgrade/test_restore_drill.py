"""Issue 31, "backup and restore", as a drill on the production path.

A live stack (uvicorn, a Celery worker, beat, PostgreSQL, a private Redis) with real node
and fabric agent processes over HTTP (``tests/upgrade/fleet.py``). Then, as an operator
would (docs/operations.md, "Restore"):

1. leases run; an order load goes on through the API while ``pg_dump -Fc`` backs the
   database up (the server's own major version);
2. orders go on after the backup: new leases go active on the hosts;
3. the disaster: web, worker and beat stop (the agents keep running), Redis is FLUSHALLed
   — it holds nothing the restore needs, which the rest of the drill proves;
4. ``pg_restore`` into a fresh database, the portal pointed at it, ``manage.py migrate``
   (a no-op) and web, worker and beat started again;
5. the agents' next reports resync their hosts to the restored desired state
   (``portal/fleet/services/restore.py``): every lease created after the backup loses its
   login and GPUs on the hosts (fenced), the leases of the backup keep theirs;
   ``manage.py restore_check`` passes (no double booking, usage continuous, every state
   with its transition event, no orphan grant) and the agents converge (stack invariants).

Billing: a lease created after the backup has no row in the restored database, so nothing
bills it (its usage, had any been metered, went with the rest of that database); asserted
below from the restored database's usage records and the live one's.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import psycopg
import pytest

from tests.portal.leasing.stack import (
    PYTHON,
    ROOT,
    Stack,
    StackConfig,
    check_invariants,
    server_url,
)
from tests.upgrade import fleet
from tests.upgrade.load import OrderLoad

pytestmark = [pytest.mark.services("postgres", "redis"), pytest.mark.slow]
CONVERGE_TIMEOUT_S = float(os.environ.get("GPUPOOL_DRILL_TIMEOUT_S", "90"))


def _major(text: str) -> int:
    m = re.search(r"(\d+)(?:\.\d+)?", text)
    assert m, text
    return int(m.group(1))


def _client_matches_server(stack: Stack) -> None:
    """pg_dump/pg_restore must be the server's major version (a newer pg_dump writes an
    archive an older pg_restore cannot read; an older one refuses a newer server)."""
    server = stack.query("SHOW server_version")[0][0]
    for tool in ("pg_dump", "pg_restore"):
        out = subprocess.run([tool, "--version"], capture_output=True, text=True, check=True)
        assert _major(out.stdout.split("(PostgreSQL)", 1)[-1]) == _major(server), \
            (out.stdout, server)


def _manage(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "manage.py", *args], cwd=ROOT, env=stack.env(),
                          capture_output=True, text=True, timeout=300, check=False)


def _running(stack: Stack) -> set[str]:
    rows = stack.query("SELECT id::text FROM leasing_lease WHERE state IN "
                       "('provisioning', 'active', 'notice', 'releasing')")
    return {r[0] for r in rows}


def _desired_accounts(stack: Stack) -> set[str]:
    """The lease logins the (restored) database's desired documents grant."""
    rows = stack.query("SELECT g->>'account' FROM fleet_nodedesiredstate d CROSS JOIN "
                       "LATERAL jsonb_array_elements(d.document->'access_grants') g")
    return {r[0] for r in rows}


def _stop_portal(stack: Stack) -> None:
    for proc in [stack.web, stack.beat, *stack.workers]:
        if proc is not None:
            stack._kill(proc, 15)
    stack.workers.clear()


def _start_portal(stack: Stack) -> None:
    stack.start_web()
    stack.start_worker()
    stack.start_beat()
    stack._wait_web()


@pytest.mark.skipif(shutil.which("pg_dump") is None or shutil.which("redis-server") is None,
                    reason="pg_dump/pg_restore or redis-server not installed")
def test_restore_drill_fences_leases_granted_after_the_backup(tmp_path: Path) -> None:
    config = StackConfig(nodes=3, gpus_per_node=8, nodes_per_leaf=8, tenants=2,
                         quota_gpus=12, max_pending=10, workers=1, web_workers=1,
                         reconcile_every_s=2.0, env={"GPUPOOL_SIMULATED_AGENTS": "0"})
    with Stack(config) as stack:
        _client_matches_server(stack)
        agents = fleet.start_agents(stack, ROOT)
        live_db = stack.db_name
        try:
            _drill(stack, agents, tmp_path)
        finally:
            agents.stop()
            if stack.db_name != live_db:  # the stack drops the restored one
                with psycopg.connect(f"{server_url()}/postgres", autocommit=True) as conn:
                    conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                 "WHERE datname = %s", [live_db])
                    conn.execute(f'DROP DATABASE IF EXISTS "{live_db}"')


def _drill(stack: Stack, agents: fleet.Fleet, tmp_path: Path) -> None:
    live_url = stack.db_url
    timings: dict[str, float] = {}
    # 1. leases of the backup, and a load through the API while pg_dump runs
    before = fleet.order(stack, "t0", 4, "before-backup")
    fleet.wait_state(stack, before, ("active",))
    load = OrderLoad(stack, "t1", seed=7, pause_s=0.1)
    load.start()
    time.sleep(2)
    dump = tmp_path / "gpupool.dump"
    began = time.monotonic()
    subprocess.run(["pg_dump", "-Fc", "-f", str(dump), stack.db_url], check=True,
                   capture_output=True, timeout=300)
    timings["pg_dump_s"] = time.monotonic() - began
    acked_at_dump = len(load.acked)
    # 2. orders go on after the backup: new leases on the hosts
    after = fleet.order(stack, "t0", 4, "after-backup")
    fleet.wait_state(stack, after, ("active",))
    time.sleep(2)
    load.stop.set()
    load.join(60)
    assert not load.errors(), load.errors()[:5]
    assert fleet.account_name(after) in agents.accounts()
    running_live = _running(stack)
    # 3. the disaster: portal down (agents keep running), Redis emptied
    began = time.monotonic()
    _stop_portal(stack)
    flushed = subprocess.run(["redis-cli", "-p", str(stack.redis_port), "flushall"],
                             capture_output=True, text=True, check=True, timeout=30)
    assert flushed.stdout.strip() == "OK"
    # 4. restore into a fresh database; the portal points at it
    restored = f"{stack.db_name}_restored"
    with psycopg.connect(f"{server_url()}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{restored}"')
    stack.db_name, stack.db_url = restored, f"{server_url()}/{restored}"
    t = time.monotonic()
    subprocess.run(["pg_restore", "--no-owner", "-d", stack.db_url, str(dump)], check=True,
                   capture_output=True, timeout=300)
    timings["pg_restore_s"] = time.monotonic() - t
    migrate = _manage(stack, "migrate", "--no-input")
    assert migrate.returncode == 0 and "No migrations to apply" in migrate.stdout, migrate.stdout
    _start_portal(stack)
    timings["portal_down_s"] = time.monotonic() - began
    # 5. what the restored database grants vs what the hosts grant
    running_restored = _running(stack)
    granted_after = running_live - running_restored  # leases the restore forgot
    assert before in running_restored and after in granted_after, (before, after)
    assert not stack.query("SELECT 1 FROM leasing_lease WHERE id = %s", [after])
    t = time.monotonic()
    forgotten = {fleet.account_name(x) for x in granted_after}
    deadline = time.monotonic() + CONVERGE_TIMEOUT_S
    while time.monotonic() < deadline:
        check = _manage(stack, "restore_check")
        if check.returncode == 0 and agents.accounts() == _desired_accounts(stack) \
                and not check_invariants(stack):
            break
        time.sleep(1)
    timings["fenced_and_converged_s"] = time.monotonic() - t
    on_hosts, desired = agents.accounts(), _desired_accounts(stack)
    assert not forgotten & on_hosts, f"still granted after the restore: {forgotten & on_hosts}"
    assert fleet.account_name(before) in on_hosts, "a lease of the backup lost its host"
    assert on_hosts == desired, (on_hosts, desired)
    check = _manage(stack, "restore_check")
    assert check.returncode == 0, check.stdout + check.stderr
    assert all(line.startswith("ok") for line in check.stdout.splitlines()), check.stdout
    assert not check_invariants(stack), check_invariants(stack)
    resyncs = stack.query("SELECT count(*) FROM core_auditlog WHERE action = "
                          "'fleet.desired_resync'")[0][0]
    assert resyncs >= 1  # the hosts were brought back by the resync, audited
    usage_sql = "SELECT count(*) FROM billing_usagerecord WHERE lease_id::text = ANY(%s)"
    billed = stack.query(usage_sql, [sorted(granted_after)])[0][0]
    with psycopg.connect(live_url) as conn:
        row = conn.execute(usage_sql, [sorted(granted_after)]).fetchone()
    metered_live = row[0] if row else 0
    assert billed == 0  # what ran after the backup is billed to nobody (docs/operations.md)
    print(f"restore drill: {acked_at_dump} orders acknowledged before the dump, "
          f"{len(load.acked)} in all ({len(load.answers)} requests, 0 errors); "
          f"{len(granted_after)} leases granted after the backup fenced, "
          f"{len(desired)} restored grants on the hosts; {resyncs} resyncs; usage rows of "
          f"the fenced leases: {metered_live} in the lost database, 0 restored; "
          + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()))
