"""The console's storage page: operators declare storage ports per fabric (finding 11.4)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from portal.core.models import AuditLog
from portal.inventory.generator import ClusterSpec, cluster_generate
from portal.inventory.models import Fabric, HcaPort, StorageEndpoint
from tests.portal.factories import make_user

STORAGE = "0x00000000005a0001"


@pytest.fixture
def staff(db: Any) -> Client:
    cluster_generate(actor=None, spec=ClusterSpec(nodes=1, gpus_per_node=2))
    HcaPort.objects.create(fabric=Fabric.objects.get(), port_guid=STORAGE, device="mlx5_0",
                           description="storage-01 mlx5_0")
    client = Client()
    client.force_login(make_user("ops", staff=True))
    return client


def test_console_adds_and_removes_a_storage_port(staff: Client) -> None:
    url = reverse("console:storage")
    done = staff.post(url, {"form": "add", "fabric": "fabric-1", "node_name": "storage-01"},
                      follow=True)
    assert "Storage port added." in done.content.decode()
    row = StorageEndpoint.objects.get()
    assert (row.port_guid, row.name) == (STORAGE, "storage-01")
    assert STORAGE in staff.get(url).content.decode()
    assert AuditLog.objects.filter(action="fabric.storage_add").count() == 1
    staff.post(url, {"form": "remove", "endpoint": str(row.pk)})
    assert not StorageEndpoint.objects.exists()
    assert AuditLog.objects.filter(action="fabric.storage_remove").count() == 1


@pytest.mark.parametrize(("data", "field"), [
    ({"fabric": "fabric-1", "port_guid": "0x00000000005a0099"}, "port_guid"),
    ({"fabric": "fabric-1", "node_name": "gpu-node-0001"}, "node_name"),  # a GPU node
    ({"fabric": "nope", "node_name": "storage-01"}, "fabric"),
])
def test_console_storage_form_shows_the_error_at_the_field(staff: Client, data: dict[str, str],
                                                           field: str) -> None:
    resp = staff.post(reverse("console:storage"), {"form": "add", **data})
    assert resp.status_code == 200
    assert field in resp.context["form"].errors
    assert not StorageEndpoint.objects.exists()


def test_console_storage_remove_of_a_bad_id_is_a_404(staff: Client) -> None:
    resp = staff.post(reverse("console:storage"), {"form": "remove", "endpoint": "x1"})
    assert resp.status_code == 404
