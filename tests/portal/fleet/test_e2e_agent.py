"""The real agent code (agents/) against the real portal over loopback HTTP."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from agents.client.backoff import Backoff
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
from portal.fleet import selectors, services
from portal.fleet.models import AgentReport, GpuTelemetry
from portal.fleet.services.enrolment import bootstrap_token_create
from portal.inventory.models import HcaPort, Node


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def make_agent(tmp: Path, url: str, token: str, clock: Clock) -> tuple[NodeAgent,
                                                                        FakeSysfsWriter]:
    writer = FakeSysfsWriter(tmp / "sys")
    for hca in gpu_node_hcas(1):
        writer.add(hca)
    write_fake_proc(tmp / "proc", "gpu-node-01", cpus=4, mem_gib=1)
    api = FakeNvml("h100x8", host="gpu-node-01", seed=1)
    api.nvmlInit()
    ib = InfinibandCollector(tmp / "sys")
    sampler = Sampler(HostCollector(tmp / "proc"), ib, NvmlCollector(api), clock=clock)
    settings = AgentSettings(state_dir=tmp / "state", bootstrap_token=token, fsync=False)
    agent = NodeAgent(settings, PortalClient(url), sampler,
                      NodeApplier(ib, FakeAccess(), FakeIpoib()), clock=clock, wall=clock,
                      backoff=Backoff(base_s=1, cap_s=60, rng=random.Random(1)))
    return agent, writer


def run_for(agent: NodeAgent, clock: Clock, seconds: float) -> None:
    end = clock.now + seconds
    while clock.now < end:
        agent.tick()
        clock.now += 1


@pytest.mark.django_db(transaction=True)
def test_real_agent_enrols_reports_and_applies_desired_state(live_server: Any,
                                                            tmp_path: Path) -> None:
    _, token = bootstrap_token_create(actor=None, hostname="gpu-node-01")
    clock = Clock()
    agent, writer = make_agent(tmp_path, live_server.url, token, clock)
    agent.tick()
    assert agent.enrolled()
    node = Node.objects.get(hostname="gpu-node-01")
    assert node.gpus.count() == 8 and node.gpu_model == "H100"
    run_for(agent, clock, 35)
    assert AgentReport.objects.filter(agent__node=node).count() >= 3
    assert GpuTelemetry.objects.filter(node=node).count() == 8
    assert agent.rejected == 0 and len(agent.spool) == 0

    port = HcaPort.objects.filter(node=node).first()
    assert port is not None
    part = {"name": "tenant_acme", "pkey": "0x0101", "membership": "full", "ipoib": True,
            "port_guids": [port.port_guid]}
    grant = {"lease_id": "ls_ab12", "account": "lease-ab12", "gpu_indices": [0, 1],
             "ssh_authorized_keys": ["ssh-ed25519 AAAAC3Nza alice@example.org"],
             "expires_at": "2030-01-01T00:00:00+00:00"}
    gen = services.node_desired_set(node=node, partitions=[part], access_grants=[grant])
    run_for(agent, clock, 25)
    assert agent.applier.generation_applied == gen
    assert not selectors.node_converged(node=node, generation=gen)  # the SM has not acted
    writer.set_pkeys(port.device, port.port_number, [0xFFFF, 0x8101])  # the SM adds the key
    run_for(agent, clock, 25)
    assert selectors.node_converged(node=node, generation=gen)
    agent.client.close()


@pytest.mark.django_db(transaction=True)
def test_long_poll_answers_when_a_new_generation_appears(live_server: Any) -> None:
    _, token = bootstrap_token_create(actor=None, hostname="gpu-node-09")
    client = PortalClient(live_server.url)
    cred = client.enrol({"protocol": 1, "bootstrap_token": token, "role": "node",
                         "hostname": "gpu-node-09", "agent_version": "test"})
    result: dict[str, Any] = {}

    def poll() -> None:
        started = time.monotonic()
        result["doc"] = client.desired_state(0, 20)
        result["took"] = time.monotonic() - started

    waiter = threading.Thread(target=poll)
    waiter.start()
    time.sleep(1.5)
    gen = services.node_desired_set(node=Node.objects.get(hostname="gpu-node-09"),
                                    partitions=[], access_grants=[])
    waiter.join(timeout=25)
    assert result["doc"]["generation"] == gen and result["doc"]["node_id"] == cred.node_id
    assert 1.0 < result["took"] < 5.0
    started = time.monotonic()
    assert client.desired_state(gen, 1) is None
    assert time.monotonic() - started >= 0.9
    with pytest.raises(Exception, match="403"):
        httpx.get(f"{live_server.url}/api/agent/v1/nodes/nd_other/desired-state",
                  headers={"Authorization": f"Bearer {cred.credential}"}).raise_for_status()
    client.close()
