from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from portal.core import clock
from portal.core.models import AuditLog
from portal.inventory.generator import ClusterSpec, cluster_generate
from portal.inventory.models import Gpu, Node
from portal.leasing.models import Allocation, LeaseState
from portal.tenants.models import Role
from tests.portal.billing.builders import make_lease
from tests.portal.factories import add_member, make_tenant, make_user

PAGES = [("console:index", {}), ("console:fabric", {}), ("console:queue", {}),
         ("console:partitions", {}), ("console:tenants", {}), ("console:audit", {}),
         ("console:billing", {}), ("console:storage", {})]


@pytest.fixture
def world(db: Any) -> dict[str, Any]:
    tenant = make_tenant("a")
    member = add_member(tenant, "a-member", Role.OWNER)
    staff = make_user("ops", staff=True)
    cluster_generate(actor=None, spec=ClusterSpec(nodes=2, gpus_per_node=2))
    node = Node.objects.order_by("hostname").first()
    now = clock.now()
    lease = make_lease(tenant, active_at=now - timedelta(hours=1), end_at=now + timedelta(hours=2),
                       name="busy-lease")
    gpu = node.gpus.first()
    Allocation.objects.create(lease=lease, gpu=gpu, node=node, slot=0, start_at=lease.active_at,
                              end_at=lease.end_at)
    waiting = make_lease(tenant, active_at=None, end_at=now + timedelta(hours=3),
                         state=LeaseState.QUEUED, name="waiting-lease", wait_reason="capacity")
    return {"tenant": tenant, "member": member, "staff": staff, "node": node, "lease": lease,
            "waiting": waiting, "gpu": gpu}


def login(user: Any) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


@pytest.mark.parametrize(("name", "kwargs"), PAGES)
def test_pages_render_for_staff_only(world: dict[str, Any], name: str, kwargs: dict) -> None:
    url = reverse(name, kwargs=kwargs)
    assert login(world["staff"]).get(url).status_code == 200
    assert login(world["member"]).get(url).status_code == 403
    anon = login(None).get(url)
    assert anon.status_code == 302 and "/accounts/login/" in anon["Location"]


def test_fabric_map_links_nodes(world: dict[str, Any]) -> None:
    text = login(world["staff"]).get(reverse("console:fabric")).content.decode()
    assert "<svg" in text and reverse("console:node", args=[world["node"].hostname]) in text


def test_drain_shows_affected_leases_then_applies_with_audit(world: dict[str, Any]) -> None:
    client, node = login(world["staff"]), world["node"]
    url = reverse("console:node", args=[node.hostname])
    assert login(world["member"]).post(url, {"state": "draining", "confirm": "yes"}).status_code == 403
    preview = client.get(url, {"state": "draining"}).content.decode()
    assert "busy-lease" in preview and 'name="confirm"' in preview
    node.refresh_from_db()
    assert node.state == "ready"  # nothing happens before confirming
    assert client.post(url, {"state": "draining", "confirm": "yes", "reason": "fw"}).status_code == 302
    node.refresh_from_db()
    assert node.state == "draining"
    assert AuditLog.objects.filter(action="node.set_state", object_id=str(node.pk)).exists()


def test_gpu_quarantine_and_release_are_audited(world: dict[str, Any]) -> None:
    client, gpu = login(world["staff"]), world["gpu"]
    url = reverse("console:gpu_health", args=[gpu.pk])
    assert login(world["member"]).post(url, {"action": "quarantine"}).status_code == 403
    client.post(url, {"action": "quarantine"})
    assert Gpu.objects.get(pk=gpu.pk).health == "quarantined"
    client.post(url, {"action": "release"})
    assert Gpu.objects.get(pk=gpu.pk).health == "healthy"
    assert list(AuditLog.objects.filter(object_id=str(gpu.pk), object_type="inventory.gpu")
                .order_by("id").values_list("action", flat=True)) == ["gpu.quarantine",
                                                                      "gpu.release"]


def test_queue_shows_reason_and_boost_is_audited(world: dict[str, Any]) -> None:
    client, lease = login(world["staff"]), world["waiting"]
    text = client.get(reverse("console:queue")).content.decode()
    assert "waiting-lease" in text and "capacity" in text
    assert login(world["member"]).post(reverse("console:queue"),
                                       {"lease": lease.pk, "boost": 5}).status_code == 403
    client.post(reverse("console:queue"), {"lease": lease.pk, "boost": 50, "reason": "vip"})
    lease.refresh_from_db()
    assert lease.queue_boost == 50
    assert AuditLog.objects.get(action="lease.queue_boost").changes["queue_boost"] == [0, 50]


def test_tenant_suspend_resume_and_audit_filter(world: dict[str, Any]) -> None:
    client, tenant = login(world["staff"]), world["tenant"]
    client.post(reverse("console:tenants"), {"tenant": "a", "action": "suspend"})
    tenant.refresh_from_db()
    assert tenant.status == "suspended"
    client.post(reverse("console:tenants"), {"tenant": "a", "action": "resume"})
    tenant.refresh_from_db()
    assert tenant.status == "active"
    text = client.get(reverse("console:audit"), {"action": "tenant.suspend"}).content.decode()
    assert "tenant.suspend" in text and "tenant.resume" not in text


def test_billing_page_streams_exports_for_all_tenants(world: dict[str, Any]) -> None:
    response = login(world["staff"]).get(reverse("console:billing"), {"type": "focus-csv"})
    assert response.status_code == 200 and response.streaming
    assert b"".join(response.streaming_content).startswith(b"BilledCost,")
