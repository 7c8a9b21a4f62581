"""Finding 11.5: nothing told the tenant which HCA or P_Key index to use. The connection
details (API and lease page) and the lease account's environment now carry NCCL_IB_HCA,
UCX_NET_DEVICES, the IPoIB interface and NCCL_IB_PKEY where the key is not at index 0."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from portal.core import clock
from portal.fleet.models import NodeDesiredState, NodeObservedState, PortTelemetry
from portal.inventory.models import HcaPort, Node
from portal.leasing import services
from portal.leasing.models import Allocation, Lease
from portal.tenants.models import Role
from tests.portal import driving
from tests.portal.driving import drive
from tests.portal.factories import add_member, client_for

frozen_clock = driving.frozen_clock
run_on_commit = driving.run_on_commit
pytestmark = [pytest.mark.services("postgres"), pytest.mark.usefixtures("run_on_commit")]


@pytest.fixture
def pool(db: Any, frozen_clock: Any) -> dict[str, Any]:
    a, b = driving.small_pool()
    return {"a": a, "b": b, "alice": add_member(a, "alice", Role.MEMBER),
            "bob": add_member(b, "bob", Role.MEMBER)}


def order(pool: dict[str, Any], who: str, tenant: str, gpus: int = 8) -> Lease:
    spec = services.OrderSpec(models=["H100"], gpu_count=gpus, duration_hours=Decimal(2))
    return services.order_create(actor=pool[who], tenant=pool[tenant], spec=spec)


def _node(lease: Lease) -> Node:
    return Node.objects.get(pk=Allocation.objects.filter(lease=lease).values("node")[:1])


def _connection(pool: dict[str, Any], who: str, lease: Lease) -> dict[str, Any]:
    resp = client_for(pool[who]).get(f"/api/v1/leases/{lease.pk}/connection")
    assert resp.status_code == 200, resp.content
    return resp.json()


def test_connection_details_give_the_nccl_environment(pool: dict[str, Any]) -> None:
    lease = order(pool, "alice", "a")
    drive()
    node = _node(lease)
    conn = _connection(pool, "alice", lease)
    pkey = conn["pkey"]  # 0x8xxx: the tenant's full key
    nccl = conn["nodes"][0]["nccl"]
    devices = sorted(HcaPort.objects.filter(node=node).values_list("device", flat=True))
    hcas = ",".join(f"{d}:1" for d in devices)
    assert nccl["environment"] == {
        "NCCL_IB_HCA": f"={hcas}", "UCX_NET_DEVICES": hcas,
        "UCX_IB_PKEY": f"0x{int(pkey, 16) & 0x7FFF:04x}", "GPUPOOL_IB_PKEY": pkey,
        "GPUPOOL_IPOIB_IF": f"ib0.{pkey[2:]}"}  # key at index 0: no NCCL_IB_PKEY
    assert {p["pkey_index"] for p in nccl["ports"]} == {0}
    # the same environment is in the lease account's grant on the node
    grant = NodeDesiredState.objects.get(node=node).document["access_grants"][0]
    assert grant["environment"] == nccl["environment"]
    # and on the lease page
    page = Client()
    page.force_login(pool["alice"])
    html = page.get(reverse("web:lease", kwargs={"lease_id": lease.pk})).content.decode()
    assert f"export NCCL_IB_HCA=={hcas}" in html and f"ib0.{pkey[2:]}" in html


def test_nccl_ib_pkey_is_given_where_the_key_is_not_at_index_0(pool: dict[str, Any]) -> None:
    """A port shared with an earlier tenant: that tenant's key sits at index 0, so the
    reported table decides the index and NCCL_IB_PKEY is set; the observed IPoIB child
    name is used."""
    first = order(pool, "alice", "a", gpus=4)
    drive()
    node = _node(first)
    Node.objects.exclude(pk=node.pk).update(state=Node.State.DRAINED)
    second = order(pool, "bob", "b", gpus=4)
    drive()
    assert _node(second) == node
    a_key = int(_connection(pool, "alice", first)["pkey"], 16)
    b_key = int(_connection(pool, "bob", second)["pkey"], 16)
    for port in HcaPort.objects.filter(node=node):
        PortTelemetry.objects.update_or_create(
            node=node, device=port.device, port=port.port_number,
            defaults={"ts": clock.now(), "port_guid": port.port_guid,
                      "data": {"pkeys": [f"0x{a_key:04x}", "0x7fff", f"0x{b_key:04x}"]}})
    NodeObservedState.objects.update_or_create(node=node, defaults={"document": {
        "ipoib_children": [{"parent": "ib1", "name": "ib1.b", "pkey": f"0x{b_key:04x}"}]}})
    env_b = _connection(pool, "bob", second)["nodes"][0]["nccl"]["environment"]
    assert env_b["NCCL_IB_PKEY"] == "2" and env_b["GPUPOOL_IPOIB_IF"] == "ib1.b"
    env_a = _connection(pool, "alice", first)["nodes"][0]["nccl"]["environment"]
    assert "NCCL_IB_PKEY" not in env_a


def test_odd_device_names_never_reach_the_lease_environment() -> None:
    """An imported description with odd characters must not break provisioning (the wire
    refuses unsafe environment values) nor land in a shell environment."""
    from portal.fleet.nccl import nccl_details

    ports = [{"device": "mlx5_0", "port_number": 1, "port_guid": "0x1", "reported": None,
              "ipoib_children": [{"pkey": "0x8101", "name": "ib0;rm"}], "index0_owner": 7},
             {"device": "mlx5 $(x)", "port_number": 1, "port_guid": "0x2", "reported": None,
              "ipoib_children": None, "index0_owner": 7}]
    out = nccl_details(ports, pkey=0x0101, tenant_id=7)
    assert out["environment"]["NCCL_IB_HCA"] == "=mlx5_0:1"
    assert out["ipoib_interface"] == "ib0.8101"
    assert [p["hca"] for p in out["ports"]] == ["mlx5_0:1"]
