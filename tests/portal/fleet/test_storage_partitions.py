"""Storage partitions (issue 11 finding 4) and NCCL-ready tenant keys (finding 5) in the
partition map the portal gives the fabric manager."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from portal.core.errors import ApplicationError
from portal.fleet.models import FabricDesiredState
from portal.inventory.models import Fabric, HcaPort, Node, StorageEndpoint
from portal.inventory.services import storage_endpoint_add, storage_endpoint_remove
from portal.leasing import services
from portal.leasing.models import Allocation, Lease
from portal.tenants.models import Role
from tests.portal import driving
from tests.portal.driving import drive
from tests.portal.factories import add_member, client_for, make_user

frozen_clock = driving.frozen_clock
run_on_commit = driving.run_on_commit
STORAGE = "0x00000000005a0001"

pytestmark = [pytest.mark.services("postgres"), pytest.mark.usefixtures("run_on_commit")]


@pytest.fixture
def pool(db: Any, frozen_clock: Any) -> dict[str, Any]:
    a, b = driving.small_pool()
    fabric = Fabric.objects.get()
    HcaPort.objects.create(fabric=fabric, port_guid=STORAGE, device="mlx5_0",
                           description="storage-01 mlx5_0")  # imported, no GPU node
    return {"a": a, "b": b, "alice": add_member(a, "alice", Role.MEMBER),
            "bob": add_member(b, "bob", Role.MEMBER), "fabric": fabric,
            "staff": make_user("ops", staff=True)}


def order(pool: dict[str, Any], who: str, tenant: str, gpus: int = 8) -> Lease:
    spec = services.OrderSpec(models=["H100"], gpu_count=gpus, duration_hours=Decimal(2))
    return services.order_create(actor=pool[who], tenant=pool[tenant], spec=spec)


def fabric_map() -> dict[str, dict[str, dict[str, Any]]]:
    doc = FabricDesiredState.objects.get(name="default").document
    return {p["name"]: {m["guid"]: m for m in p["members"]} for p in doc["partitions"]}


def test_storage_port_is_limited_member_of_every_tenant_partition(
        pool: dict[str, Any], django_capture_on_commit_callbacks: Any) -> None:
    """Finding 11.4: declared storage joins each tenant's key as a limited member, so both
    tenants reach it and neither reaches the other through it."""
    storage_endpoint_add(actor=pool["staff"], fabric=pool["fabric"], node_name="storage-01")
    order(pool, "alice", "a")
    order(pool, "bob", "b")
    drive()
    parts = fabric_map()
    assert set(parts) == {"tenant_a", "tenant_b"}
    for members in parts.values():
        assert members[STORAGE] == {"guid": STORAGE, "membership": "limited", "index0": False}
        assert all(m["membership"] == "full" for g, m in members.items() if g != STORAGE)
    # removing the endpoint takes it out of every partition at once
    with django_capture_on_commit_callbacks(execute=True):
        storage_endpoint_remove(actor=pool["staff"], endpoint=StorageEndpoint.objects.get())
    assert all(STORAGE not in members for members in fabric_map().values())


def test_tenant_ports_ask_for_the_key_at_index_0(pool: dict[str, Any]) -> None:
    """Finding 11.5: every port of a tenant's nodes asks for the tenant's key at index 0."""
    lease = order(pool, "alice", "a")
    drive()
    guids = set(HcaPort.objects.filter(node__allocations__lease=lease)
                .values_list("port_guid", flat=True))
    members = fabric_map()["tenant_a"]
    assert set(members) == guids
    assert all(m["index0"] is True for m in members.values())


def test_a_shared_port_has_one_index_0_owner(pool: dict[str, Any]) -> None:
    """Two tenants on one node: only the earlier lease's tenant gets index 0 there."""
    first = order(pool, "alice", "a", gpus=4)
    drive()
    node = Allocation.objects.filter(lease=first).values_list("node", flat=True).first()
    Node.objects.exclude(pk=node).update(state=Node.State.DRAINED)  # b must share the node
    order(pool, "bob", "b", gpus=4)
    drive()
    parts = fabric_map()
    shared = set(parts["tenant_a"]) & set(parts["tenant_b"])
    assert shared
    assert all(parts["tenant_a"][g]["index0"] and not parts["tenant_b"][g]["index0"]
               for g in shared)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"port_guid": "0x00000000005a0002"}, "port_guid"),  # not an imported port
    ({"port_guid": "zz"}, "port_guid"),
    ({"node_name": "storage-99"}, "node_name"),
    ({}, "port_guid"),
    ({"port_guid": STORAGE, "node_name": "storage-01"}, "node_name"),
])
def test_storage_endpoint_bad_input_names_the_field(pool: dict[str, Any], kwargs: dict[str, str],
                                                    field: str) -> None:
    with pytest.raises(ApplicationError) as exc:
        storage_endpoint_add(actor=pool["staff"], fabric=pool["fabric"], **kwargs)
    assert field in exc.value.fields
    assert not StorageEndpoint.objects.exists()


def test_a_gpu_nodes_port_cannot_be_storage(pool: dict[str, Any]) -> None:
    gpu_port = HcaPort.objects.filter(node__isnull=False).first()
    assert gpu_port is not None
    with pytest.raises(ApplicationError) as exc:
        storage_endpoint_add(actor=pool["staff"], fabric=pool["fabric"],
                             port_guid=gpu_port.port_guid)
    assert "GPU node" in exc.value.fields["port_guid"][0]
    assert not StorageEndpoint.objects.exists()


API = "/api/v1/storage-endpoints"


def test_storage_endpoints_api_round_trip(pool: dict[str, Any]) -> None:
    client = client_for(pool["staff"])
    made = client.post(API, {"fabric": pool["fabric"].name, "node_name": "storage-01"},
                       format="json")
    assert made.status_code == 201, made.content
    assert [(r["port_guid"], r["name"], r["fabric"]) for r in made.json()] == [
        (STORAGE, "storage-01", pool["fabric"].name)]
    listed = client.get(API, {"fabric": pool["fabric"].name}).json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert [r["port_guid"] for r in rows] == [STORAGE]
    assert client.delete(f"{API}/{made.json()[0]['id']}").status_code == 204
    assert not StorageEndpoint.objects.exists()


@pytest.mark.parametrize(("body", "field"), [
    ({"fabric": "nope", "port_guid": STORAGE}, "fabric"),
    ({"fabric": "fabric-1", "port_guid": "0xzz"}, "port_guid"),
    ({"fabric": "fabric-1", "port_guid": "1" * 30}, "port_guid"),
    ({"fabric": "fabric-1", "node_name": "storage-99"}, "node_name"),
    ({"fabric": "fabric-1"}, "port_guid"),
    ({"fabric": ["x"], "node_name": {"a": 1}}, "fabric"),
])
def test_storage_endpoints_api_bad_input_is_a_400_naming_the_field(
        pool: dict[str, Any], body: dict[str, Any], field: str) -> None:
    resp = client_for(pool["staff"]).post(API, body, format="json")
    assert resp.status_code == 400, resp.content
    assert field in resp.json()["fields"]
    assert not StorageEndpoint.objects.exists()
