"""Deliveries end to end: lease news → message → signed POSTs to a real receiver."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.utils import timezone

from portal.billing.hooks import BudgetNews, budget_alert
from portal.leasing import notify
from portal.leasing.models import Lease, LeaseState
from portal.tenants.models import Role
from portal.webhooks import delivery, services
from portal.webhooks.models import Endpoint, Message
from tests.portal.factories import add_member, make_tenant
from tests.portal.webhooks.conftest import Receiver, drive, spec_verify

pytestmark = [pytest.mark.django_db, pytest.mark.services("postgres")]


@pytest.fixture
def tenant_a() -> Any:
    tenant = make_tenant("a")
    return tenant, add_member(tenant, "a-admin", Role.ADMIN)


def _lease(tenant: Any, name: str, state: str = LeaseState.ACTIVE) -> Lease:
    now = timezone.now()
    return Lease.objects.create(tenant=tenant, name=name, allowed_models=["H100"],
                                gpu_model="H100", gpu_count=2, start_at=now, active_at=now,
                                end_at=now + timedelta(hours=1), state=state)


def _endpoint(tenant: Any, admin: Any, url: str, events: list[str] | None = None) -> tuple[
        Endpoint, str]:
    issued = services.endpoint_create(actor=admin, tenant=tenant, url=url,
                                      events=events or ["*"])
    return issued.endpoint, issued.secret


def _news(capture: Any, lease: Lease) -> None:
    with capture(execute=True):
        notify.lease_changed(lease)


def test_fail_twice_then_succeed_delivers_three_times_under_one_id(
        tenant_a: Any, receiver: Receiver, sent: list[Any],
        django_capture_on_commit_callbacks: Any) -> None:
    tenant, admin = tenant_a
    _, secret = _endpoint(tenant, admin, receiver.url())
    receiver.script["/hook"] = [500, 503]
    _news(django_capture_on_commit_callbacks, _lease(tenant, "train-1"))
    assert drive(django_capture_on_commit_callbacks) == 3
    got = receiver.at("/hook")
    assert len(got) == 3
    assert len({r.headers["webhook-id"] for r in got}) == 1
    assert got[0].headers["webhook-id"].startswith("msg_")
    assert all(spec_verify(secret, r.headers, r.body) for r in got)
    assert all(abs(time.time() - int(r.headers["webhook-timestamp"])) < 300 for r in got)
    payload = json.loads(got[0].body)
    assert payload["type"] == "lease.active"
    assert payload["data"]["name"] == "train-1" and payload["data"]["gpu_count"] == 2
    assert payload["data"]["tenant"] == "a" and payload["data"]["state"] == "active"
    message = Message.objects.get()
    assert message.status == Message.Status.DELIVERED
    assert [a.response_status for a in message.attempts.all()] == [500, 503, 200]
    assert [c for _, c in sent][-2:] == [0.2, 0.4]  # each retry queued with its delay


def test_a_wrong_secret_does_not_verify(tenant_a: Any, receiver: Receiver, sent: list[Any],
                                        django_capture_on_commit_callbacks: Any) -> None:
    tenant, admin = tenant_a
    _endpoint(tenant, admin, receiver.url())
    _news(django_capture_on_commit_callbacks, _lease(tenant, "x"))
    drive(django_capture_on_commit_callbacks)
    other = services.signing.new_secret()
    assert not spec_verify(other, receiver.received[0].headers, receiver.received[0].body)


def test_410_disables_the_endpoint_at_once(tenant_a: Any, receiver: Receiver, sent: list[Any],
                                            django_capture_on_commit_callbacks: Any) -> None:
    tenant, admin = tenant_a
    endpoint, _ = _endpoint(tenant, admin, receiver.url())
    receiver.script["/hook"] = [410]
    _news(django_capture_on_commit_callbacks, _lease(tenant, "x"))
    assert drive(django_capture_on_commit_callbacks) == 1
    endpoint.refresh_from_db()
    assert not endpoint.enabled and "410" in endpoint.disabled_reason
    _news(django_capture_on_commit_callbacks, _lease(tenant, "y"))
    assert Message.objects.count() == 1  # a disabled endpoint gets nothing new


def test_exhausted_tries_disable_and_mail_the_admins(
        tenant_a: Any, receiver: Receiver, sent: list[Any],
        django_capture_on_commit_callbacks: Any) -> None:
    tenant, admin = tenant_a
    add_member(tenant, "a-owner", Role.OWNER)
    add_member(tenant, "a-member", Role.MEMBER)
    endpoint, _ = _endpoint(tenant, admin, receiver.url())
    receiver.script["/hook"] = [500] * 10
    _news(django_capture_on_commit_callbacks, _lease(tenant, "x"))
    assert drive(django_capture_on_commit_callbacks) == 3
    endpoint.refresh_from_db()
    assert not endpoint.enabled and "3 tries" in endpoint.disabled_reason
    assert Message.objects.get().status == Message.Status.FAILED
    assert len(mail.outbox) >= 1
    to = {a for m in mail.outbox if "Webhook endpoint disabled" in m.subject for a in m.to}
    assert to == {"a-admin@example.com", "a-owner@example.com"}


def test_one_tenants_events_never_reach_another_tenants_endpoint(
        tenant_a: Any, receiver: Receiver, sent: list[Any],
        django_capture_on_commit_callbacks: Any) -> None:
    tenant, admin = tenant_a
    b = make_tenant("b")
    b_admin = add_member(b, "b-admin", Role.ADMIN)
    _endpoint(tenant, admin, receiver.url("/a"))
    _endpoint(b, b_admin, receiver.url("/b"))
    _news(django_capture_on_commit_callbacks, _lease(tenant, "a-secret-lease"))
    _news(django_capture_on_commit_callbacks, _lease(b, "b-lease"))
    drive(django_capture_on_commit_callbacks)
    assert [json.loads(r.body)["data"]["name"] for r in receiver.at("/a")] == ["a-secret-lease"]
    assert [json.loads(r.body)["data"]["name"] for r in receiver.at("/b")] == ["b-lease"]


def test_events_filter_star_vs_list(tenant_a: Any, receiver: Receiver, sent: list[Any],
                                    django_capture_on_commit_callbacks: Any) -> None:
    tenant, admin = tenant_a
    _endpoint(tenant, admin, receiver.url("/all"), ["*"])
    _endpoint(tenant, admin, receiver.url("/ended"), ["lease.ended"])
    _news(django_capture_on_commit_callbacks, _lease(tenant, "a1"))
    _news(django_capture_on_commit_callbacks, _lease(tenant, "e1", LeaseState.ENDED))
    drive(django_capture_on_commit_callbacks)
    assert sorted(json.loads(r.body)["type"] for r in receiver.at("/all")) == [
        "lease.active", "lease.ended"]
    assert [json.loads(r.body)["type"] for r in receiver.at("/ended")] == ["lease.ended"]


def test_resend_sends_the_same_message_again(tenant_a: Any, receiver: Receiver,
                                             sent: list[Any],
                                             django_capture_on_commit_callbacks: Any) -> None:
    tenant, admin = tenant_a
    _endpoint(tenant, admin, receiver.url())
    _news(django_capture_on_commit_callbacks, _lease(tenant, "x"))
    drive(django_capture_on_commit_callbacks)
    message = Message.objects.get()
    with django_capture_on_commit_callbacks(execute=True):
        services.message_resend(actor=admin, message=message)
    assert sent[-1][0] == str(message.pk)
    assert drive(django_capture_on_commit_callbacks) == 1
    ids = [r.headers["webhook-id"] for r in receiver.at("/hook")]
    assert ids == [message.msg_id, message.msg_id]
    assert receiver.received[0].body == receiver.received[1].body


def test_rotation_signs_with_both_secrets_during_the_overlap_then_only_the_new(
        tenant_a: Any, receiver: Receiver, sent: list[Any], settings: Any,
        django_capture_on_commit_callbacks: Any) -> None:
    tenant, admin = tenant_a
    endpoint, old = _endpoint(tenant, admin, receiver.url())
    new = services.endpoint_rotate_secret(actor=admin, endpoint=endpoint).secret
    assert new != old and new.startswith("whsec_")
    _news(django_capture_on_commit_callbacks, _lease(tenant, "during"))
    drive(django_capture_on_commit_callbacks)
    during = receiver.received[-1]
    assert len(during.headers["webhook-signature"].split(" ")) == 2
    assert spec_verify(old, during.headers, during.body)
    assert spec_verify(new, during.headers, during.body)
    Endpoint.objects.filter(pk=endpoint.pk).update(
        previous_expires_at=timezone.now() - timedelta(seconds=1))
    _news(django_capture_on_commit_callbacks, _lease(tenant, "after"))
    drive(django_capture_on_commit_callbacks)
    after = receiver.received[-1]
    assert spec_verify(new, after.headers, after.body)
    assert not spec_verify(old, after.headers, after.body)


def test_a_lost_celery_message_is_re_driven_by_the_sweep(
        tenant_a: Any, receiver: Receiver, sent: list[Any], settings: Any,
        django_capture_on_commit_callbacks: Any) -> None:
    tenant, admin = tenant_a
    _endpoint(tenant, admin, receiver.url())
    _news(django_capture_on_commit_callbacks, _lease(tenant, "x"))
    message = Message.objects.get()
    sent.clear()  # the queued task is lost
    settings.GPUPOOL_WEBHOOKS_SWEEP_GRACE_S = 0
    assert delivery.sweep() == 1
    assert sent == [(str(message.pk), 0)]
    assert delivery.deliver(message.pk) == "delivered"
    assert delivery.deliver(message.pk) == "skipped"  # a duplicate task sends nothing
    assert len(receiver.received) == 1
    assert delivery.sweep() == 0


def test_a_claimed_try_is_not_sent_twice(tenant_a: Any, receiver: Receiver,
                                         sent: list[Any],
                                         django_capture_on_commit_callbacks: Any) -> None:
    tenant, admin = tenant_a
    _endpoint(tenant, admin, receiver.url())
    _news(django_capture_on_commit_callbacks, _lease(tenant, "x"))
    message = Message.objects.get()
    assert services.message_claim(message_id=message.pk, hold_s=60) is not None
    assert delivery.deliver(message.pk) == "skipped"
    assert receiver.received == []


def test_budget_alerts_are_delivered(tenant_a: Any, receiver: Receiver, sent: list[Any],
                                     django_capture_on_commit_callbacks: Any) -> None:
    tenant, admin = tenant_a
    _endpoint(tenant, admin, receiver.url(), ["budget.alert"])
    budget_alert.emit(BudgetNews(event="budget.alert", tenant_id=str(tenant.pk), alert_id="7",
                                 month="2026-12", threshold=80, used_gpu_hours="80.000",
                                 budget_gpu_hours="100.00"))
    drive(django_capture_on_commit_callbacks)
    payload = json.loads(receiver.received[0].body)
    assert payload["type"] == "budget.alert"
    assert payload["data"]["threshold"] == 80 and payload["data"]["tenant"] == "a"


def test_the_readme_verification_snippet_verifies_a_real_delivery(
        tenant_a: Any, receiver: Receiver, sent: list[Any],
        django_capture_on_commit_callbacks: Any) -> None:
    from pathlib import Path

    readme = (Path(__file__).parents[3] / "README.md").read_text()
    section = readme[readme.index("## Webhooks"):]
    snippet = section.split("```python\n", 1)[1].split("```", 1)[0]
    scope: dict[str, Any] = {}
    exec(snippet, scope)  # noqa: S102 (our own README)
    tenant, admin = tenant_a
    _, secret = _endpoint(tenant, admin, receiver.url())
    _news(django_capture_on_commit_callbacks, _lease(tenant, "x"))
    drive(django_capture_on_commit_callbacks)
    got = receiver.received[0]
    assert scope["verify"](secret, got.headers, got.body)
    assert not scope["verify"](secret, got.headers, got.body + b" ")


def test_news_of_a_tenant_without_endpoints_costs_one_query(
        tenant_a: Any, django_assert_num_queries: Any) -> None:
    from portal.leasing.hooks import LeaseNews
    from portal.webhooks import events

    tenant, _ = tenant_a
    lease = _lease(tenant, "x")
    with django_assert_num_queries(1):
        events.lease_news(LeaseNews(event="lease.active", tenant_id=str(tenant.pk),
                                    lease_id=str(lease.pk), state="active"))
    assert not Message.objects.exists()
