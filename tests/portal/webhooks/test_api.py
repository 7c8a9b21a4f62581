"""/api/v1/webhooks: owners and admins of the caller's tenant only; another tenant's
endpoint is a 404; the secret is shown once; bad input is a 400 naming the field."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from portal.tenants.models import Role
from portal.tenants.services import api_key_create
from portal.webhooks import services
from portal.webhooks.models import Endpoint, Message
from tests.portal.factories import add_member, client_for, make_tenant

pytestmark = [pytest.mark.django_db, pytest.mark.services("postgres")]
URL = "http://127.0.0.1:18131/hook"


@pytest.fixture
def world() -> dict[str, Any]:
    a, b = make_tenant("a"), make_tenant("b")
    admin = add_member(a, "a-admin", Role.ADMIN)
    endpoint = services.endpoint_create(actor=admin, tenant=a, url=URL, events=["*"]).endpoint
    services.messages_enqueue(tenant_id=a.pk, event="lease.active", data={"name": "a-secret"})
    return {"a": a, "b": b, "admin": admin, "endpoint": endpoint,
            "member": add_member(a, "a-member", Role.MEMBER),
            "b_admin": add_member(b, "b-admin", Role.ADMIN)}


def _detail(name: str, pk: Any) -> str:
    return reverse(name, kwargs={"pk": pk})


def test_create_answers_the_secret_once(world: dict[str, Any]) -> None:
    client = client_for(world["admin"])
    made = client.post(reverse("webhook-list"), {"url": URL, "events": ["lease.active"]},
                       format="json")
    assert made.status_code == 201
    secret = made.json()["secret"]
    assert secret.startswith("whsec_")
    listed = client.get(reverse("webhook-list")).content.decode()
    shown = client.get(_detail("webhook-detail", made.json()["id"])).content.decode()
    assert secret not in listed and secret not in shown
    assert "secret" not in client.get(_detail("webhook-detail", made.json()["id"])).json()


@pytest.mark.parametrize(("body", "field"), [
    ({"url": URL, "events": []}, "events"),
    ({"url": URL, "events": ["lease.bogus"]}, "events"),
    ({"url": "not a url", "events": ["*"]}, "url"),
    ({"url": "ftp://example.com/x", "events": ["*"]}, "url"),
    ({"events": ["*"]}, "url"),
])
def test_bad_input_names_the_field(world: dict[str, Any], body: dict[str, Any],
                                   field: str) -> None:
    response = client_for(world["admin"]).post(reverse("webhook-list"), body, format="json")
    assert response.status_code == 400
    assert field in response.json()["fields"]


def test_another_tenant_gets_404_and_changes_nothing(world: dict[str, Any]) -> None:
    endpoint, client = world["endpoint"], client_for(world["b_admin"])
    message = Message.objects.get()
    for method, url, body in [
            ("get", _detail("webhook-detail", endpoint.pk), {}),
            ("patch", _detail("webhook-detail", endpoint.pk), {"events": ["lease.ended"]}),
            ("delete", _detail("webhook-detail", endpoint.pk), {}),
            ("post", _detail("webhook-rotate-secret", endpoint.pk), {}),
            ("get", _detail("webhook-deliveries", endpoint.pk), {}),
            ("post", _detail("webhook-delivery-resend", message.pk), {})]:
        response = getattr(client, method)(url, body, format="json")
        assert response.status_code == 404, (method, url)
        assert "a-secret" not in response.content.decode()
    assert client.get(reverse("webhook-list")).json()["results"] == []
    endpoint.refresh_from_db()
    assert endpoint.events == ["*"] and endpoint.secret == world["endpoint"].secret


def test_a_member_who_is_not_admin_gets_403(world: dict[str, Any]) -> None:
    client = client_for(world["member"])
    assert client.get(reverse("webhook-list")).status_code == 403
    assert client.post(reverse("webhook-list"), {"url": URL, "events": ["*"]},
                       format="json").status_code == 403
    assert client.delete(_detail("webhook-detail", world["endpoint"].pk)).status_code == 403


def test_another_tenants_key_acts_for_its_own_tenant_only(world: dict[str, Any]) -> None:
    from portal.tenants.models import Membership

    Membership.objects.create(tenant=world["b"], user=world["admin"], role=Role.ADMIN)
    key = api_key_create(actor=world["admin"], name="b-key", tenant=world["b"]).secret
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert client.get(_detail("webhook-detail", world["endpoint"].pk)).status_code == 404
    made = client.post(reverse("webhook-list"), {"url": URL, "events": ["*"]}, format="json")
    assert made.status_code == 201
    assert Endpoint.objects.get(pk=made.json()["id"]).tenant == world["b"]


def test_update_rotate_deliveries_resend_delete(world: dict[str, Any]) -> None:
    client, endpoint = client_for(world["admin"]), world["endpoint"]
    patched = client.patch(_detail("webhook-detail", endpoint.pk),
                           {"events": ["lease.ended", "lease.active"], "enabled": False},
                           format="json")
    assert patched.status_code == 200
    assert patched.json()["events"] == ["lease.active", "lease.ended"]
    assert patched.json()["enabled"] is False
    message = Message.objects.get()
    refused = client.post(_detail("webhook-delivery-resend", message.pk))
    assert refused.status_code == 409
    client.patch(_detail("webhook-detail", endpoint.pk), {"enabled": True}, format="json")
    rotated = client.post(_detail("webhook-rotate-secret", endpoint.pk))
    assert rotated.status_code == 200 and rotated.json()["secret"] != endpoint.secret
    assert rotated.json()["previous_secret_expires_at"]
    log = client.get(_detail("webhook-deliveries", endpoint.pk)).json()["results"]
    assert log[0]["webhook_id"] == message.msg_id and log[0]["payload"]["type"] == "lease.active"
    assert client.post(_detail("webhook-delivery-resend", message.pk)).status_code == 200
    assert client.delete(_detail("webhook-detail", endpoint.pk)).status_code == 204
    assert not Endpoint.objects.exists()
