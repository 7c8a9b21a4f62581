"""Issue 31, "upgrades without downtime": the previous release's agents (from git history,
``tests/upgrade/oldtree.py`` says which commit and why) report to the CURRENT portal and
apply the desired state it writes.

The live stack of the current code (uvicorn, a Celery worker, beat, PostgreSQL, a private
Redis; ``GPUPOOL_SIMULATED_AGENTS=0``) and, as real processes over HTTP, two node agents
and the fabric agent started from ``git archive <old> agents`` with that version's own
fake hardware (``fake_gpus = "h100x8"``). Asserted: the old agents enrol and report;
a lease placed on an old node goes active, which needs the node to have applied the
desired state (the lease login in ``etc/passwd``, its GPUs in the lease's env file, the
tenant P_Key in the port's table) and to say so; release takes all of it off the host and
the lease ends; every stack invariant holds (agents converged included).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.bench.real_agents import NodeHost
from tests.portal.leasing.stack import Stack, StackConfig, check_invariants
from tests.upgrade import fleet, oldtree

pytestmark = [pytest.mark.services("postgres", "redis"), pytest.mark.slow]


def _port_pkeys(host: NodeHost) -> set[int]:
    keys: set[int] = set()
    for table in (host.root / "sys" / "class" / "infiniband").glob("*/ports/*/pkeys"):
        for entry in table.iterdir():
            if entry.name.isdigit():
                keys.add(int(entry.read_text().strip(), 16) & 0x7FFF)
    return keys - {0, 0x7FFF}


def _wait(check: Callable[[], bool], timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")
def test_previous_release_agent_reports_and_applies_current_desired_state(tmp_path: Path) -> None:
    oldtree.require_history()
    old = oldtree.extract(tmp_path / "old", "agents")
    config = StackConfig(nodes=2, gpus_per_node=8, nodes_per_leaf=8, tenants=1,
                         quota_gpus=16, workers=1, web_workers=1, reconcile_every_s=2.0,
                         env={"GPUPOOL_SIMULATED_AGENTS": "0"})
    with Stack(config) as stack:
        # the agents really are the old tree's code
        assert fleet.which_agents(stack, old) == str(old / "agents" / "__init__.py")
        agents = fleet.start_agents(stack, old)
        try:
            _run(stack, agents)
        finally:
            agents.stop()


def _run(stack: Stack, agents: fleet.Fleet) -> None:
    reports = stack.query("SELECT count(*), count(DISTINCT agent_id) FROM fleet_agentreport")
    assert reports[0][1] == 3, reports  # two nodes and the fabric agent reported
    began = time.monotonic()
    lease = fleet.order(stack, "t0", 8, "n-1")
    fleet.wait_state(stack, lease, ("active",))
    to_active = time.monotonic() - began
    [(node_id, hostname)] = stack.query(
        "SELECT DISTINCT n.id, n.hostname FROM leasing_allocation a JOIN inventory_node n "
        "ON n.id = a.node_id WHERE a.lease_id = %s AND a.live", [lease])
    host = next(h for h in agents.hosts if h.hostname == hostname)
    account = fleet.account_name(lease)
    # desired state applied by the old agent: the login, the GPUs, the tenant partition
    assert account in agents.accounts(), agents.accounts()
    grants = agents.grants()
    assert {g.split("/")[0] for gs in grants.values() for g in gs} == {hostname}, grants
    assert sum(len(g) for g in grants.values()) == 8, grants
    [(document,)] = stack.query("SELECT document FROM fleet_nodedesiredstate WHERE node_id = %s",
                                [node_id])
    wanted = {int(p["pkey"], 16) & 0x7FFF for p in document.get("partitions", [])}
    assert wanted, document
    assert wanted <= _port_pkeys(host), (wanted, _port_pkeys(host))
    [(applied, desired)] = stack.query(
        "SELECT o.generation_applied, d.generation FROM fleet_nodeobservedstate o "
        "JOIN fleet_nodedesiredstate d ON d.node_id = o.node_id WHERE o.node_id = %s",
        [node_id])
    assert applied == desired, (applied, desired)
    # release cleans the host
    began = time.monotonic()
    fleet.release(stack, "t0", lease)
    fleet.wait_state(stack, lease, ("ended",))
    to_ended = time.monotonic() - began
    assert _wait(lambda: account not in agents.accounts() and not agents.grants()), \
        (agents.accounts(), agents.grants())
    assert _wait(lambda: not check_invariants(stack)), check_invariants(stack)
    later = stack.query("SELECT count(*) FROM fleet_agentreport")  # still reporting
    assert later[0][0] > reports[0][0]
    print(f"old agents ({oldtree.OLD_COMMIT[:7]}): order → active {to_active:.1f} s, "
          f"release → ended {to_ended:.1f} s")
