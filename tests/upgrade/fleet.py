"""Real agent processes of a given code tree against a live stack (tests/upgrade).

``start_agents(stack, tree)`` starts one ``python -m agents node`` per inventory node and
one ``python -m agents fabric`` (fake driver), each from ``tree`` (the current checkout or
the previous release's ``git archive``: ``cwd`` and ``PYTHONPATH`` are that tree, so
``import agents`` is that tree's), on fake sysfs/procfs/NVML trees written by the current
test helpers (the on-disk formats are the kernel's, not ours). The fake subnet manager
(``tests.bench.real_agents.SubnetManager``) puts each port's P_Keys into its node's sysfs
once the fabric agent reports a map applied.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.bench.real_agents import (
    NodeHost,
    SubnetManager,
    _agent_config,
    _hosts,
    _tokens,
    _wait_enrolled,
)
from tests.portal.leasing.stack import PYTHON, Stack
from tests.security.bb_agents import granted_gpus

ACTIVE_TIMEOUT_S = 90.0


@dataclass
class Fleet:
    hosts: list[NodeHost]
    sm: SubnetManager
    tree: Path

    @property
    def access_roots(self) -> list[Path]:
        return [h.root / "access" for h in self.hosts]

    def grants(self) -> dict[str, set[str]]:
        """lease account id on the hosts -> the GPUs (host/index) it may use."""
        return granted_gpus(self.access_roots)

    def accounts(self) -> set[str]:
        """Every lease account in the hosts' ``etc/passwd``."""
        out: set[str] = set()
        for root in self.access_roots:
            path = root / "etc" / "passwd"
            if path.exists():
                out |= {line.split(":", 1)[0] for line in path.read_text().splitlines()
                        if line.strip()}
        return out

    def stop(self) -> None:
        self.sm.stop.set()


def agent_env(stack: Stack, tree: Path) -> dict[str, str]:
    return {**stack.env(), "PYTHONPATH": str(tree), "GPUPOOL_AGENT_PORTAL_TIMEOUT_S": "40"}


def which_agents(stack: Stack, tree: Path) -> str:
    """The file ``import agents`` resolves to when started as the agents are."""
    done = subprocess.run([PYTHON, "-c", "import agents; print(agents.__file__)"], cwd=tree,
                          env=agent_env(stack, tree), capture_output=True, text=True,
                          timeout=60, check=True)
    return done.stdout.strip()


def start_agents(stack: Stack, tree: Path) -> Fleet:
    base = stack.tmp / "hosts"
    hosts = _hosts(stack, base)
    env = agent_env(stack, tree)
    pattern = os.path.commonprefix([h.hostname for h in hosts]).rstrip("0123456789") + "*"
    for host, token in zip(hosts, _tokens(stack, "node", len(hosts), pattern), strict=True):
        cfg = _agent_config(host.root / "agent.toml", stack.base_url, token, host.root, "node")
        stack._spawn(f"agent-{host.hostname}",
                     [PYTHON, "-m", "agents", "node", "--config", str(cfg)], env, cwd=tree)
    fabric = base / "fabric"
    from agents.host import write_fake_proc
    from agents.sysfs.faketree import FakeSysfsWriter

    FakeSysfsWriter(fabric / "sys")
    write_fake_proc(fabric / "proc", "sm-host", cpus=2, mem_gib=1)
    token = _tokens(stack, "fabric", 1, "sm-host")[0]
    cfg = _agent_config(fabric / "fabric.toml", stack.base_url, token, fabric, "fabric")
    stack._spawn("agent-fabric", [PYTHON, "-m", "agents", "fabric", "--config", str(cfg)],
                 env, cwd=tree)
    _wait_enrolled(stack, len(hosts) + 1)
    sm = SubnetManager(stack, hosts, 0.0)
    sm.start()
    return Fleet(hosts=hosts, sm=sm, tree=tree)


def api(stack: Stack, tenant: str, method: str, url: str, body: Any = None,
        timeout: float = 30) -> httpx.Response:
    headers = {**stack.auth(tenant), "Idempotency-Key": str(uuid.uuid4())}
    with stack.client(timeout=timeout) as c:
        return c.request(method, url, json=body, headers=headers)


def order(stack: Stack, tenant: str, gpus: int, name: str) -> str:
    r = api(stack, tenant, "POST", "/api/v1/orders",
            {"models": ["H100"], "gpu_count": gpus, "duration_hours": "1", "name": name})
    assert r.status_code == 201, f"order refused: {r.status_code} {r.text[:500]}"
    return str(r.json()["id"])


def release(stack: Stack, tenant: str, lease_id: str) -> None:
    r = api(stack, tenant, "POST", f"/api/v1/leases/{lease_id}/release",
            {"reason": "upgrade test"})
    assert r.status_code < 300, f"release: {r.status_code} {r.text[:500]}"


def wait_state(stack: Stack, lease_id: str, states: tuple[str, ...],
               timeout: float = ACTIVE_TIMEOUT_S) -> str:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        state = stack.states([lease_id]).get(lease_id, "")
        if state in states:
            return state
        time.sleep(0.2)
    raise AssertionError(f"lease {lease_id} is {state!r}, not {states} after {timeout:g} s\n"
                         f"{stack.logs(25)}")


def account_name(lease_id: str) -> str:
    """The lease's login on the hosts (``lease-`` + 12 hex digits)."""
    return "lease-" + lease_id.replace("-", "")[:12]
