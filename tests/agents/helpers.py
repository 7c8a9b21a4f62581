"""Builders for agent tests: fake clock, fake hardware, fake portal."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import httpx

from agents.client.backoff import Backoff
from agents.client.fakeportal import FakePortal
from agents.client.portal import PortalClient
from agents.host import HostCollector, write_fake_proc
from agents.node.access import FakeAccess
from agents.node.agent import AgentSettings, NodeAgent
from agents.node.apply import NodeApplier
from agents.node.ipoib import FakeIpoib
from agents.nvml.collector import NvmlCollector
from agents.nvml.fake import FakeNvml
from agents.sysfs.faketree import FakeSysfsWriter, gpu_node_hcas
from agents.sysfs.infiniband import InfinibandCollector
from agents.telemetry import Sampler


class FakeClock:
    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make_agent(
    tmp: Path,
    portal: FakePortal,
    clock: FakeClock,
    *,
    index: int = 1,
    token: str | None = None,
    transport: httpx.BaseTransport | None = None,
    max_spooled: int = 10_000,
) -> tuple[NodeAgent, FakeNvml, FakeSysfsWriter]:
    hostname = f"gpu-node-{index:02d}"
    sysfs, proc = tmp / "sys", tmp / "proc"
    writer = FakeSysfsWriter(sysfs)
    for hca in gpu_node_hcas(index):
        writer.add(hca)
    write_fake_proc(proc, hostname, cpus=4, mem_gib=1)
    api = FakeNvml("h100x8", host=hostname, seed=index)
    api.nvmlInit()
    ib = InfinibandCollector(sysfs)
    sampler = Sampler(HostCollector(proc), ib, NvmlCollector(api), clock=clock)
    client = PortalClient("http://portal.test", transport=transport or portal.transport())
    settings = AgentSettings(
        state_dir=tmp / "state", bootstrap_token=token, max_spooled_reports=max_spooled,
        fsync=False,
    )
    applier = NodeApplier(ib, FakeAccess(), FakeIpoib(), wall=clock)
    agent = NodeAgent(settings, client, sampler, applier, clock=clock, wall=clock,
                      backoff=Backoff(base_s=1, cap_s=60, rng=random.Random(index)))
    return agent, api, writer


MIG_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA alice@example.org"


def mig_grant(n: int, start: int) -> dict[str, Any]:
    """Lease ``n``'s grant: one ``1g.10gb`` instance of GPU 0 at slot ``start``."""
    return {"lease_id": f"ls_{n}", "account": f"lease-{n}", "gpu_indices": [0],
            "ssh_authorized_keys": [MIG_KEY],
            "mig_devices": [{"gpu_index": 0, "profile": "1g.10gb", "start": start}]}


def mig_desired(generation: int, starts: list[int]) -> dict[str, Any]:
    """A node's desired state: a ``1g.10gb`` of GPU 0 at each start, one lease each."""
    return {"protocol": 1, "node_id": "nd_1", "generation": generation,
            "issued_at": "2026-12-01T09:00:00+00:00", "partitions": [],
            "access_grants": [mig_grant(s, s) for s in starts],
            "mig": [{"gpu_index": 0, "instances": [{"profile": "1g.10gb", "start": s}
                                                   for s in starts]}]}


def write_node_config(tmp_path: Path, portal_url: str, fake_gpus: str, listen: str) -> Path:
    """``agent.toml`` for ``python -m agents node`` on fake hardware under ``tmp_path``."""
    cfg = tmp_path / "agent.toml"
    cfg.write_text(f"""
[portal]
url = "{portal_url}"
[agent]
state_dir = "{tmp_path / 'state'}"
sample_interval_s = 0.3
report_interval_s = 0.3
long_poll_s = 1
[hardware]
sysfs_root = "{tmp_path / 'sys'}"
fake_gpus = "{fake_gpus}"
access_root = "{tmp_path / 'root'}"
[metrics]
listen = "{listen}"
""")
    return cfg
