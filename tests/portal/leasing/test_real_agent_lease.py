"""Issue 12 on the production path: the real node agent (agents/) over loopback HTTP moves
a lease to ACTIVE and to ENDED with its reports alone — no reconciler, no simulated agent."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from portal.fleet.models import TenantPartition
from portal.fleet.services.enrolment import bootstrap_token_create
from portal.inventory.models import HcaPort, Node
from portal.leasing import services
from portal.leasing.lifecycle import placing, provisioning, releasing
from portal.leasing.models import Lease, Quota
from portal.leasing.models import LeaseState as S
from portal.tenants.models import Role
from tests.portal.factories import add_member, make_tenant
from tests.portal.fleet.test_e2e_agent import Clock, make_agent, run_for

pytestmark = pytest.mark.services("postgres")


def _state(lease: Lease) -> str:
    lease.refresh_from_db()
    return lease.state


@pytest.mark.django_db(transaction=True)
def test_real_agent_reports_activate_and_end_a_lease(live_server: Any, tmp_path: Path,
                                                      settings: Any) -> None:
    settings.GPUPOOL_SIMULATED_AGENTS = False
    _, token = bootstrap_token_create(actor=None, hostname="gpu-node-01")
    clock = Clock()
    agent, writer = make_agent(tmp_path, live_server.url, token, clock)
    run_for(agent, clock, 3)
    node = Node.objects.get(hostname="gpu-node-01")
    tenant = make_tenant("acme")
    Quota.objects.create(tenant=tenant, gpu_model="H100", max_gpus=8)
    alice = add_member(tenant, "alice", Role.MEMBER)
    lease = services.order_create(actor=alice, tenant=tenant, spec=services.OrderSpec(
        models=["H100"], gpu_count=2, duration_hours=Decimal(1)))
    placing.run_schedule_pass()
    provisioning.provision(lease.pk)
    assert _state(lease) == S.PROVISIONING
    pkey = TenantPartition.objects.get(tenant=tenant, state="active").pkey
    port = HcaPort.objects.filter(node=node).first()
    assert port is not None
    writer.set_pkeys(port.device, port.port_number, [0xFFFF, 0x8000 | pkey])  # the SM's part
    run_for(agent, clock, 25)  # pull the desired state, apply it, report
    assert _state(lease) == S.ACTIVE
    services.lease_release(actor=alice, lease=lease)
    releasing.teardown(lease.pk)
    writer.set_pkeys(port.device, port.port_number, [0xFFFF])
    run_for(agent, clock, 25)
    assert _state(lease) == S.ENDED
    agent.client.close()
