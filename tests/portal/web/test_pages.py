"""Every page renders for its users, refuses strangers, and reads only the caller's tenant."""

from __future__ import annotations

from typing import Any

import pytest
from django.core import mail
from django.test import Client
from django.urls import reverse

from portal.fleet.models import GpuTelemetry
from portal.leasing.models import Allocation
from tests.portal.web.conftest import active_lease, client_for, order

PAGES = ["web:dashboard", "web:order", "web:leases", "web:calendar", "web:profile", "web:usage",
         "web:members", "web:api_keys", "web:quotas"]


@pytest.mark.parametrize("name", PAGES)
def test_pages_render_for_a_member(alice: Client, name: str) -> None:
    response = alice.get(reverse(name))
    assert response.status_code == 200
    assert b"<main" in response.content


@pytest.mark.parametrize("name", PAGES)
def test_pages_need_sign_in(pool: dict[str, Any], name: str) -> None:
    response = Client().get(reverse(name))
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_dashboard_shows_active_lease_quota_and_free_gpus(pool: dict[str, Any],
                                                          alice: Client) -> None:
    lease = active_lease(pool, name="big-train")
    body = alice.get("/").content.decode()
    assert "big-train" in body and reverse("web:lease", kwargs={"lease_id": lease.pk}) in body
    assert 'role="progressbar"' in body  # quota bar, with its numbers as text
    assert "GPUs in use: 8 of 16" in body
    free = {row["model"]: row["gpus_free"] for row in alice.get("/").context["free"]}
    assert free == {"H100": 24}


def test_lease_page_shows_connection_details_and_telemetry(pool: dict[str, Any],
                                                           alice: Client) -> None:
    lease = active_lease(pool)
    alloc = Allocation.objects.filter(lease=lease).select_related("gpu", "node").first()
    GpuTelemetry.objects.create(node=alloc.node, index=alloc.gpu.index, uuid=alloc.gpu.uuid,
                                ts=lease.start_at, healthy=False, last_xid=79,
                                data={"gpu_util_pct": 93, "temperature_c": 71})
    body = alice.get(reverse("web:lease", kwargs={"lease_id": lease.pk})).content.decode()
    assert alloc.gpu.uuid in body
    assert f"ssh lease-{lease.pk.hex[:12]}@{alloc.node.hostname}" in body
    assert "P_Key" in body
    assert "Hardware problems on this lease" in body and "XID 79" in body
    assert f"/ws/leases/{lease.pk}/" in body
    assert "93 %" in body  # latest values are readable without JavaScript


def test_other_tenants_lease_is_404(pool: dict[str, Any]) -> None:
    lease = order(pool, who="bob", tenant="b")
    alice = client_for(pool["alice"])
    for name in ("web:lease", "web:lease_extend", "web:lease_release", "web:lease_cancel"):
        url = reverse(name, kwargs={"lease_id": lease.pk})
        assert alice.get(url).status_code == 404
        assert alice.post(url, {"confirm": "on", "end_at": "2030-01-01T00:00"}).status_code == 404
    lease.refresh_from_db()
    assert lease.state == "queued"


def test_unknown_lease_is_a_friendly_404(alice: Client) -> None:
    response = alice.get("/leases/00000000-0000-0000-0000-000000000000/")
    assert response.status_code == 404
    assert "We could not find that page" in response.content.decode()


def test_viewer_cannot_order_or_act(pool: dict[str, Any]) -> None:
    lease = order(pool)
    vic = client_for(pool["vic"])
    assert vic.get(reverse("web:order")).status_code == 403
    assert "not allowed" in vic.get(reverse("web:order")).content.decode()
    assert vic.post(reverse("web:lease_cancel", kwargs={"lease_id": lease.pk}),
                    {"confirm": "on"}).status_code == 403
    assert vic.get(reverse("web:lease", kwargs={"lease_id": lease.pk})).status_code == 200


def test_tenant_switcher(pool: dict[str, Any]) -> None:
    from portal.tenants.models import Membership

    Membership.objects.create(tenant=pool["b"], user=pool["alice"], role="member")
    alice = client_for(pool["alice"])
    assert "switch" in alice.get("/").content.decode().lower()
    response = alice.post(reverse("web:tenant_switch"), {"tenant": "b", "next": "/leases/"})
    assert response.status_code == 302 and response["Location"] == "/leases/"
    assert alice.session["active_tenant"] == "b"
    # a tenant she is not in, and an off-site next: refused and ignored
    response = alice.post(reverse("web:tenant_switch"),
                          {"tenant": "nope", "next": "https://evil.example/"})
    assert response["Location"] == "/"
    assert alice.session["active_tenant"] == "b"


def test_language_switch_translates_pages(alice: Client) -> None:
    alice.post("/i18n/setlang/", {"language": "zh-hans", "next": "/"})
    body = alice.get("/").content.decode()
    assert 'lang="zh-hans"' in body
    assert "仪表板" in body and "订购 GPU" in body
    assert "Dashboard" not in body


def test_friendly_403_404_500_templates_render() -> None:
    from django.template import loader

    for name in ("403.html", "404.html"):
        assert "gpupool" in loader.get_template(name).render({})
    assert "Something went wrong" in loader.get_template("500.html").render({})


def test_password_reset_by_email(pool: dict[str, Any]) -> None:
    client = Client()
    response = client.post(reverse("web:password_reset"), {"email": "alice@example.com"})
    assert response.status_code == 302
    assert len(mail.outbox) == 1
    link = next(line for line in mail.outbox[0].body.splitlines() if "/reset/" in line)
    path = link.split("testserver", 1)[1]
    response = client.get(path, follow=True)
    assert response.status_code == 200
    form_url = response.redirect_chain[-1][0]
    response = client.post(form_url, {"new_password1": "x", "new_password2": "y"})
    assert response.status_code == 200 and "field-error" in response.content.decode()
    response = client.post(form_url, {"new_password1": "A-much-better-pass-42",
                                      "new_password2": "A-much-better-pass-42"})
    assert response.status_code == 302
    assert Client().login(username="alice", password="A-much-better-pass-42")


def test_login_locks_out_after_repeated_failures(pool: dict[str, Any], settings: Any) -> None:
    settings.AXES_ENABLED = True
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT):
        response = client.post("/accounts/login/", {"username": "alice", "password": "wrong"})
        assert response.status_code in (200, 429)
    response = client.post("/accounts/login/", {"username": "alice",
                                                "password": "correct-horse-battery"})
    assert response.status_code == 429
    assert "_auth_user_id" not in client.session


def test_login_page_labels_and_error(pool: dict[str, Any]) -> None:
    response = Client().post("/accounts/login/", {"username": "alice", "password": "nope"})
    body = response.content.decode()
    assert response.status_code == 200
    assert 'for="id_username"' in body and 'for="id_password"' in body
    assert 'role="alert"' in body


def test_htmx_is_vendored_not_from_a_cdn(alice: Client) -> None:
    body = alice.get("/").content.decode()
    assert "/static/vendor/htmx/htmx.min.js" in body
    assert "cdn" not in body.lower() and "unpkg" not in body


def test_lease_page_shows_unreachable_node_and_alerts(pool: dict[str, Any], alice: Client) -> None:
    from portal.fleet.models import NodeHealth

    lease = active_lease(pool)
    node = Allocation.objects.filter(lease=lease).first().node
    NodeHealth.objects.create(node=node, reachable=False, alerts=[
        {"key": "ib", "kind": "ib_link_down", "severity": "critical",
         "message": "mlx5_0 port 1 is down", "since": "2026-11-02T09:00:00Z"}])
    body = alice.get(reverse("web:lease", kwargs={"lease_id": lease.pk})).content.decode()
    assert 'class="alert"' in body
    assert "node not reachable" in body and "mlx5_0 port 1 is down" in body


def test_staff_pick_a_tenant_with_the_switcher(pool: dict[str, Any]) -> None:
    from tests.portal.factories import make_user

    staff = client_for(make_user("ops", staff=True))
    landing = staff.get("/", follow=True)  # staff with no tenant land on the console
    assert landing.redirect_chain == [(reverse("console:index"), 302)]
    assert 'id="tenant-switch"' in landing.content.decode()
    staff.post(reverse("web:tenant_switch"), {"tenant": "b", "next": "/"})
    response = staff.get("/")
    assert response.status_code == 200 and response.context["request"].tenant == pool["b"]
