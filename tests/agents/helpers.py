"""Builders for agent tests: fake clock, fake hardware, fake portal."""

from __future__ import annotations

import random
from pathlib import Path

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
