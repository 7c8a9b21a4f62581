"""Issue 28 on the production path: seven tenants' ``1g.10gb`` orders become ACTIVE on one
H100 through the real node agent (agents/, over loopback HTTP) applying the MIG layout to
the fake NVML and reporting the instances; the portal stores each MIG-… UUID the agent
reported, and the account of each lease gets its own ``CUDA_VISIBLE_DEVICES`` and only its
own instance's two ``nvidia-cap`` capability nodes."""

from __future__ import annotations

import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from agents.client.backoff import Backoff
from agents.client.portal import PortalClient
from agents.host import FakeHost, HostCollector, write_fake_proc
from agents.node.access import FakeAccess
from agents.node.agent import AgentSettings, NodeAgent
from agents.node.apply import NodeApplier
from agents.node.ipoib import FakeIpoib
from agents.node.migapply import MigApplier
from agents.nvml.collector import NvmlCollector
from agents.nvml.fake import FakeNvml
from agents.nvml.migcaps import MigCapabilities
from agents.sysfs.faketree import FakeSysfsWriter, gpu_node_hcas
from agents.sysfs.infiniband import InfinibandCollector
from agents.telemetry import Sampler
from portal.fleet.models import TenantPartition
from portal.fleet.services.enrolment import bootstrap_token_create
from portal.inventory.models import Gpu, HcaPort, MigMode
from portal.leasing import services
from portal.leasing.lifecycle import placing, provisioning, releasing
from portal.leasing.models import Lease, MigInstance
from portal.leasing.models import LeaseState as S
from portal.leasing.selectors import mig_devices
from portal.tenants.models import Role
from tests.portal.factories import add_member, make_tenant
from tests.portal.fleet.test_e2e_agent import Clock, run_for

pytestmark = pytest.mark.services("postgres")


def _agent(tmp: Path, url: str, token: str, clock: Clock,
           ) -> tuple[NodeAgent, FakeSysfsWriter, FakeNvml, FakeAccess]:
    writer = FakeSysfsWriter(tmp / "sys")
    for hca in gpu_node_hcas(1):
        writer.add(hca)
    write_fake_proc(tmp / "proc", "gpu-node-01", cpus=4, mem_gib=1)
    api = FakeNvml("h100x8", host="gpu-node-01", seed=1)
    api.nvmlInit()
    api.attach_caps(tmp / "proc")
    host = FakeHost()
    host.handlers.append(api.host_handler)
    ib = InfinibandCollector(tmp / "sys")
    access = FakeAccess()
    sampler = Sampler(HostCollector(tmp / "proc"), ib, NvmlCollector(api), clock=clock)
    settings = AgentSettings(state_dir=tmp / "state", bootstrap_token=token, fsync=False)
    applier = NodeApplier(ib, access, FakeIpoib(), mig=MigApplier(api, host, caps=MigCapabilities(tmp / "proc")))
    agent = NodeAgent(settings, PortalClient(url), sampler, applier, clock=clock, wall=clock,
                      backoff=Backoff(base_s=1, cap_s=60, rng=random.Random(1)))
    return agent, writer, api, access


def _state(lease: Lease) -> str:
    lease.refresh_from_db()
    return lease.state


@pytest.mark.django_db(transaction=True)
def test_seven_tenants_on_one_h100_through_the_real_agent(live_server: Any, tmp_path: Path,
                                                           settings: Any) -> None:
    settings.GPUPOOL_SIMULATED_AGENTS = False
    _, token = bootstrap_token_create(actor=None, hostname="gpu-node-01")
    clock = Clock()
    agent, writer, api, access = _agent(tmp_path, live_server.url, token, clock)
    run_for(agent, clock, 3)
    gpu0 = Gpu.objects.get(node__hostname="gpu-node-01", index=0)
    assert gpu0.model == "H100"
    Gpu.objects.filter(pk=gpu0.pk).update(mig_mode=MigMode.DYNAMIC)
    leases = []
    for n in range(7):
        tenant = make_tenant(f"t{n}")
        who = add_member(tenant, f"u{n}", Role.MEMBER)
        leases.append(services.order_create(actor=who, tenant=tenant, spec=services.OrderSpec(
            models=["H100"], mig_profile="1g.10gb", duration_hours=Decimal(1))))
    placing.run_schedule_pass()
    for lease in leases:
        provisioning.provision(lease.pk)
        assert _state(lease) == S.PROVISIONING
    port = HcaPort.objects.filter(node__hostname="gpu-node-01").first()
    assert port is not None
    pkeys = [0x8000 | p for p in TenantPartition.objects.filter(state="active")
             .values_list("pkey", flat=True)]
    writer.set_pkeys(port.device, port.port_number, [0xFFFF, *pkeys])  # the SM's part
    run_for(agent, clock, 25)
    assert [_state(lease) for lease in leases] == [S.ACTIVE] * 7
    real = {(i.start, i.uuid) for r in agent.applier.mig.results.values()  # type: ignore
            for i in r.instances}
    stored = set(MigInstance.objects.values_list("start", "uuid"))
    assert stored == real and len({u for _, u in stored}) == 7
    assert api.gpus[0].mig_mode == 1 and all(g.mig_mode == 0 for g in api.gpus[1:])
    minors: list[int] = []
    for lease in leases:
        (device,) = mig_devices(lease)
        account = f"lease-{lease.pk.hex[:12]}"
        assert dict(access.grants[account].environment)["CUDA_VISIBLE_DEVICES"] == \
            device["uuid"]
        assert len(access.cap_minors(account)) == 2  # its GPU and compute instance only
        minors += access.cap_minors(account)
    assert len(set(minors)) == 14  # no tenant shares another's capability node
    # One tenant releases: its instance is destroyed on the node, the others stay.
    first = leases[0]
    start = MigInstance.objects.get(lease=first).start
    services.lease_release(actor=first.created_by, lease=first)
    releasing.teardown(first.pk)
    gone = 0x8000 | TenantPartition.objects.get(tenant=first.tenant).pkey
    writer.set_pkeys(port.device, port.port_number, [0xFFFF, *(k for k in pkeys if k != gone)])
    run_for(agent, clock, 25)
    assert _state(first) == S.ENDED
    left = {i.start for r in agent.applier.mig.results.values()  # type: ignore
            for i in r.instances}
    assert start not in left and len(left) == 6
    agent.client.close()
