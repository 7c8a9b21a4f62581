"""The tenant admin's webhook pages: add (secret once), events, log with codes, send again,
rotate, delete; members get 403, another tenant's endpoint is a 404."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from portal.tenants.models import Role
from portal.webhooks import egress, services
from portal.webhooks.models import Attempt, Endpoint, Message
from tests.portal.factories import add_member, make_tenant

pytestmark = [pytest.mark.django_db, pytest.mark.services("postgres")]
URL = "http://127.0.0.1:18132/hook"


@pytest.fixture
def admin_client() -> tuple[Client, Any, Any]:
    tenant = make_tenant("a")
    admin = add_member(tenant, "a-admin", Role.ADMIN)
    client = Client()
    client.force_login(admin)
    return client, tenant, admin


def test_add_shows_the_secret_once(admin_client: Any) -> None:
    client, _, _ = admin_client
    page = client.post(reverse("webhooks:list"), {"url": URL, "events": ["lease.active"]})
    assert page.status_code == 200
    endpoint = Endpoint.objects.get()
    assert endpoint.secret in page.content.decode() and endpoint.events == ["lease.active"]
    again = client.get(reverse("webhooks:list")).content.decode()
    detail = client.get(reverse("webhooks:detail", kwargs={"endpoint_id": endpoint.pk}))
    assert endpoint.secret not in again and endpoint.secret not in detail.content.decode()


def test_a_refused_url_is_a_form_error(admin_client: Any, settings: Any) -> None:
    settings.GPUPOOL_WEBHOOKS_ALLOW_PRIVATE = False
    client, _, _ = admin_client
    page = client.post(reverse("webhooks:list"), {"url": "http://10.1.2.3/x", "events": ["*"]})
    assert page.status_code == 400 and not Endpoint.objects.exists()


def test_log_shows_codes_and_send_again_queues_the_message(
        admin_client: Any, monkeypatch: pytest.MonkeyPatch,
        django_capture_on_commit_callbacks: Any) -> None:
    client, tenant, admin = admin_client
    endpoint = services.endpoint_create(actor=admin, tenant=tenant, url=URL,
                                        events=["*"]).endpoint
    message = services.messages_enqueue(tenant_id=tenant.pk, event="lease.ended", data={})[0]
    services.attempt_record(message=message, outcome=egress.Outcome(status=503), at=message.created)
    page = client.get(reverse("webhooks:detail", kwargs={"endpoint_id": endpoint.pk}))
    text = page.content.decode()
    assert message.msg_id in text and "503" in text and "lease.ended" in text
    sent: list[str] = []
    monkeypatch.setattr(services, "send_task", lambda mid, countdown=0: sent.append(mid))
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("webhooks:resend", kwargs={"message_id": message.pk}))
    assert response.status_code == 302 and sent == [str(message.pk)]
    assert Message.objects.get().manual and Attempt.objects.count() == 1


def test_events_rotate_delete(admin_client: Any) -> None:
    client, tenant, admin = admin_client
    endpoint = services.endpoint_create(actor=admin, tenant=tenant, url=URL,
                                        events=["*"]).endpoint
    kw = {"endpoint_id": endpoint.pk}
    client.post(reverse("webhooks:detail", kwargs=kw), {"events": ["lease.failed"]})
    endpoint.refresh_from_db()
    assert endpoint.events == ["lease.failed"]
    old = endpoint.secret
    rotated = client.post(reverse("webhooks:rotate", kwargs=kw)).content.decode()
    endpoint.refresh_from_db()
    assert endpoint.secret != old and endpoint.secret in rotated
    assert endpoint.previous_secret == old
    client.post(reverse("webhooks:delete", kwargs=kw))
    assert not Endpoint.objects.exists()


def test_members_403_and_other_tenants_404(admin_client: Any) -> None:
    _, tenant, admin = admin_client
    endpoint = services.endpoint_create(actor=admin, tenant=tenant, url=URL,
                                        events=["*"]).endpoint
    member, stranger = Client(), Client()
    member.force_login(add_member(tenant, "a-member", Role.MEMBER))
    stranger.force_login(add_member(make_tenant("b"), "b-admin", Role.ADMIN))
    assert member.get(reverse("webhooks:list")).status_code == 403
    kw = {"endpoint_id": endpoint.pk}
    assert stranger.get(reverse("webhooks:detail", kwargs=kw)).status_code == 404
    assert stranger.post(reverse("webhooks:delete", kwargs=kw)).status_code == 404
    assert Endpoint.objects.filter(pk=endpoint.pk).exists()
