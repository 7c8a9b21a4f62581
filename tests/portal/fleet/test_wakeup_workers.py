"""The long-poll wake-up with several ASGI worker processes (uvicorn --workers 2), live.

Each uvicorn process runs its own LISTEN connection (portal/fleet/wakeup.py) and fans a
notification out to its own waiters; PostgreSQL delivers every NOTIFY to every listening
connection, so a desired-state change wakes its long-poll in whichever process holds it.
Idle waiters cost the database nothing per waiter: no polling, no connection each.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from agents import __version__, protocol
from agents.sim.node import SimNode, telemetry_template
from tests.bench.http_fleet import issue_tokens, write_inventory
from tests.portal.leasing.stack import Stack, StackConfig

pytestmark = [pytest.mark.services("postgres", "redis"), pytest.mark.slow]
NODES = 24
WAIT_S = 20


def _enrol(stack: Stack) -> list[tuple[str, str, int]]:
    """(node_id, credential, node pk) of every node, enrolled over HTTP."""
    tokens, inventory = stack.tmp / "tokens.txt", stack.tmp / "inventory.json"
    write_inventory(stack, inventory)
    issue_tokens(stack, tokens, NODES)
    known = json.loads(inventory.read_text())
    template = telemetry_template()
    out = []
    with stack.client() as c:
        for i, (name, token) in enumerate(zip(sorted(known), tokens.read_text().split(),
                                              strict=False)):
            node = SimNode.build(i, name, token, known[name], template, __version__)
            r = c.post(protocol.ENROL_PATH, json=node.enrol_request())
            assert r.status_code == 201, r.text
            pk = stack.query("SELECT id FROM inventory_node WHERE hostname = %s", [name])[0][0]
            out.append((r.json()["node_id"], r.json()["credential"], int(pk)))
    return out


def _listeners(stack: Stack) -> int:
    return int(stack.query("""SELECT count(*) FROM pg_stat_activity WHERE datname = %s
                              AND query LIKE 'LISTEN %%'""", [stack.db_name])[0][0])


def _commits(stack: Stack) -> int:
    with stack.connect() as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        return int(conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s",
                                [stack.db_name]).fetchone()[0])


def _change_all(stack: Stack, nodes: list[tuple[str, str, int]]) -> float:
    """Generation 1 for every node in ONE transaction (a NOTIFY each, delivered on commit),
    as ``node_desired_set`` writes it; returns the commit time."""
    with stack.connect() as conn, conn.transaction():
        for node_id, _, pk in nodes:
            doc = {"protocol": 1, "node_id": node_id, "generation": 1, "issued_at":
                   "2026-01-01T00:00:00+00:00", "partitions": [], "access_grants": []}
            conn.execute("""INSERT INTO fleet_nodedesiredstate (node_id, generation, document,
                            updated) VALUES (%s, 1, %s, now()) ON CONFLICT (node_id) DO UPDATE
                            SET generation = 1, document = EXCLUDED.document""",
                         [pk, json.dumps(doc)])
            conn.execute("SELECT pg_notify('gpupool_desired', %s)", [f"node:{pk}"])
    return time.time()


async def _long_polls(stack: Stack, nodes: list[tuple[str, str, int]]) -> list[Any]:
    limits = httpx.Limits(max_connections=NODES, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=stack.base_url, limits=limits,
                                 timeout=WAIT_S + 10) as client:
        async def poll(node_id: str, credential: str) -> tuple[int, float, dict[str, Any]]:
            r = await client.get(protocol.DESIRED_STATE_PATH.format(node_id=node_id),
                                 params={"after_generation": 0, "wait": WAIT_S},
                                 headers={"Authorization": f"Bearer {credential}"})
            return r.status_code, time.time(), (r.json() if r.status_code == 200 else {})

        tasks = []
        for node_id, credential, _ in nodes:  # one at a time: both processes accept some
            tasks.append(asyncio.create_task(poll(node_id, credential)))
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # every long-poll has read once and is waiting
        listeners = _listeners(stack)
        c0 = _commits(stack)
        await asyncio.sleep(3.0)
        idle_commits = _commits(stack) - c0 - 1  # our own snapshot read
        changed = await asyncio.to_thread(_change_all, stack, nodes)
        results = await asyncio.gather(*tasks)
        return [listeners, idle_commits, changed, results]


def test_notify_wakes_long_polls_in_every_worker_process_without_polling() -> None:
    config = StackConfig(nodes=NODES, nodes_per_leaf=8, tenants=1, workers=0, beat=False,
                         web_workers=2, env={"GPUPOOL_SIMULATED_AGENTS": "0"})
    with Stack(config) as stack:
        nodes = _enrol(stack)
        listeners, idle_commits, changed, results = asyncio.run(_long_polls(stack, nodes))
    assert listeners == 2  # one LISTEN connection per worker process, not one per waiter
    assert idle_commits <= 2  # 24 waiters polling every 0.5 s would be ≈ 144 in 3 s
    assert [r[0] for r in results] == [200] * NODES
    assert all(r[2]["generation"] == 1 for r in results)
    lag = sorted(r[1] - changed for r in results)
    assert lag[-1] < 1.0, lag  # woken by the notification, in both processes
