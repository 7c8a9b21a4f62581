"""Issue 12: the agent reports convergence when it happens, not at its next regular report.

Real threads and real time: the agent's own ``run`` loop and long-poll against the fake
portal, and a "subnet manager" that writes the P_Key into the fake sysfs tree 300 ms after
the agent applied the desired state.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from agents.client.fakeportal import FakePortal
from agents.node.agent import NodeAgent
from tests.agents.helpers import make_agent

SM_DELAY_S = 0.3


def _wait(predicate: Any, timeout_s: float, step_s: float = 0.005) -> float | None:
    """Monotonic time at which ``predicate()`` first held, or None after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic()
        time.sleep(step_s)
    return None


def _in_sync(report: dict[str, Any], generation: int) -> bool:
    observed = report["observed"]
    ports = observed["partitions"]
    return observed["generation_applied"] == generation and bool(ports) and all(
        p["in_sync"] for p in ports)


def _start(agent: NodeAgent) -> tuple[threading.Event, threading.Thread]:
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    thread.start()
    return stop, thread


def test_agent_reports_convergence_when_pkey_appears(tmp_path: Path) -> None:
    portal = FakePortal()
    agent, _, writer = make_agent(tmp_path, portal, time.time,  # type: ignore[arg-type]
                                  token=portal.issue_bootstrap_token())
    agent.s.long_poll_s = 2
    applied_at: list[float] = []
    real_apply = agent.applier.apply

    def apply_then_sm_sets_key(desired: dict[str, Any]) -> None:
        real_apply(desired)
        applied_at.append(time.monotonic())
        if desired["partitions"]:  # the subnet manager programs the port a bit later
            threading.Timer(SM_DELAY_S, writer.set_pkeys, ("mlx5_0", 1, [0xFFFF, 0x8101])).start()

    agent.applier.apply = apply_then_sm_sets_key  # type: ignore[method-assign]
    stop, thread = _start(agent)
    try:
        assert _wait(lambda: portal.nodes and any(n.reports for n in portal.nodes.values()), 5)
        node = next(iter(portal.nodes.values()))
        guid = agent.sampler.ib.collect()[0].ports[0].port_guid
        gen = portal.set_desired(node.node_id, access_grants=[], partitions=[
            {"name": "tenant_a", "pkey": "0x0101", "membership": "full", "port_guids": [guid]}])
        seen = _wait(lambda: any(_in_sync(r, gen) for r in node.reports), 3.0)
    finally:
        stop.set()
        thread.join(5)
    assert applied_at, "the agent never applied the desired state"
    assert seen is not None, "no converged report within 3 s (the regular report is at 10 s)"
    took = seen - applied_at[0]
    assert SM_DELAY_S <= took < 0.6, f"converged report {took:.3f} s after apply"
    # the report sent right after the apply (before the SM acted) said "not yet", honestly
    first = next(r for r in node.reports if r["observed"]["generation_applied"] == gen)
    assert first["observed"]["partitions"][0]["missing"] == ["0x8101"]
    # the converged report asked to be served first (Priority u=1, §5); the regular ones
    # before the change did not
    converged = next(r["seq"] for r in node.reports if _in_sync(r, gen))
    assert converged in node.urgent_seqs
    assert node.reports[0]["seq"] not in node.urgent_seqs


def test_convergence_watch_gives_up_and_backs_off(tmp_path: Path) -> None:
    """The key never comes: the agent re-checks at growing intervals (50 ms doubling, at
    most 250 ms) for ``converge_watch_s``, then leaves it to the regular reports."""
    portal = FakePortal()
    clock_now = [1_800_000_000.0]
    agent, _, _ = make_agent(tmp_path, portal, lambda: clock_now[0],  # type: ignore[arg-type]
                             token=portal.issue_bootstrap_token())
    agent.tick()
    agent.tick()
    node = portal.node_by_hostname("gpu-node-01")
    guid = agent.sampler.ib.collect()[0].ports[0].port_guid
    portal.set_desired(node.node_id, access_grants=[], partitions=[
        {"name": "tenant_a", "pkey": "0x0101", "membership": "full", "port_guids": [guid]}])
    assert agent.poll_desired(wait_s=0)
    checks: list[float] = []
    real = agent.applier.converged

    def counted() -> bool:
        checks.append(clock_now[0])
        return real()

    agent.applier.converged = counted  # type: ignore[method-assign]
    start = clock_now[0]
    while clock_now[0] - start < 20:
        clock_now[0] += agent.tick() or 0.01
    gaps = [round(b - a, 3) for a, b in zip(checks, checks[1:], strict=False)]
    assert gaps[:5] == [0.1, 0.2, 0.25, 0.25, 0.25]
    assert max(gaps) <= 0.25
    assert 60 <= len(checks) <= 62  # 15 s of watching, then no more checks
    assert checks[-1] - start <= agent.s.converge_watch_s + 0.25
    assert agent.watch_until is None


def test_no_convergence_watch_when_already_converged(tmp_path: Path) -> None:
    """Nothing to wait for (no partition for this node): the report sent right after the
    apply already says so; no watch, no second report."""
    portal = FakePortal()
    clock_now = [1_800_000_000.0]
    agent, _, _ = make_agent(tmp_path, portal, lambda: clock_now[0],  # type: ignore[arg-type]
                             token=portal.issue_bootstrap_token())
    agent.tick()
    node = portal.node_by_hostname("gpu-node-01")
    portal.set_desired(node.node_id, access_grants=[], partitions=[])
    assert agent.poll_desired(wait_s=0)
    assert agent.watch_until is None
    agent.tick()
    sent = len(node.reports)
    for _ in range(20):
        clock_now[0] += 0.1
        agent.tick()
    assert len(node.reports) == sent
