"""Per-member GPU limits inside a tenant (Membership.max_gpus): orders, quotes, management."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import translation

from portal.core.errors import ApplicationError, PermissionDenied
from portal.core.models import AuditLog
from portal.leasing import quoting, services
from portal.leasing.models import Lease
from portal.tenants import services as tenant_services
from portal.tenants.models import Membership, Role
from tests.portal import driving
from tests.portal.driving import drive, in_threads
from tests.portal.factories import add_member, client_for

# Shared fixtures (tests/portal/driving.py), as in tests/portal/leasing/conftest.py.
frozen_clock = driving.frozen_clock
run_on_commit = driving.run_on_commit


@pytest.fixture(autouse=True)
def _no_axes_between_tests(settings: Any) -> None:
    settings.AXES_ENABLED = False


@pytest.fixture
def pool(db: Any, frozen_clock: datetime) -> dict[str, Any]:
    """4 H100 nodes × 8; tenant a (quota 16: olga owner, adam admin, alice and ann members,
    vic viewer), tenant b (bob admin)."""
    a, b = driving.small_pool()
    return {"a": a, "b": b, "olga": add_member(a, "olga", Role.OWNER),
            "adam": add_member(a, "adam", Role.ADMIN),
            "alice": add_member(a, "alice", Role.MEMBER),
            "ann": add_member(a, "ann", Role.MEMBER),
            "vic": add_member(a, "vic", Role.VIEWER), "bob": add_member(b, "bob", Role.ADMIN)}


def spec(**kw: Any) -> services.OrderSpec:
    return services.OrderSpec(**{"models": ["H100"], "gpu_count": 4,
                                 "duration_hours": Decimal(2), **kw})


def order(pool: dict[str, Any], who: str = "alice", **kw: Any) -> Lease:
    return services.order_create(actor=pool[who], tenant=pool["a"], spec=spec(**kw))


def membership(pool: dict[str, Any], who: str) -> Membership:
    return Membership.objects.get(user=pool[who], tenant=pool["a"])


def set_limit(pool: dict[str, Any], who: str, limit: int | None) -> None:
    Membership.objects.filter(user=pool[who], tenant=pool["a"]).update(max_gpus=limit)


def page_client(user: Any) -> Client:
    c = Client()
    c.force_login(user)
    return c


def api_url(pool: dict[str, Any], who: str, tenant: str = "a") -> str:
    return reverse("membership-detail", kwargs={"tenant_slug": tenant,
                                                "pk": membership(pool, who).pk})


# --- the rule at order time -------------------------------------------------------------

def test_order_over_the_limit_is_refused_with_the_field_named(pool: dict[str, Any]) -> None:
    set_limit(pool, "alice", 8)
    order(pool, gpu_count=4)
    order(pool, gpu_count=2)
    before = (Lease.objects.count(), AuditLog.objects.count(),
              Lease.objects.filter(state="queued").count())
    with pytest.raises(services.MemberLimitExceeded) as err:
        order(pool, gpu_count=4)
    assert isinstance(err.value, services.OrderRejected)
    assert err.value.code == "order_rejected"
    assert list(err.value.fields) == ["gpu_count"]
    assert "8" in err.value.message and "6" in err.value.message
    assert (Lease.objects.count(), AuditLog.objects.count(),
            Lease.objects.filter(state="queued").count()) == before
    order(pool, gpu_count=2)  # exactly up to the limit is fine


def test_refusal_is_translated(pool: dict[str, Any]) -> None:
    set_limit(pool, "alice", 2)
    with translation.override("zh-hans"), pytest.raises(ApplicationError) as err:
        order(pool, gpu_count=4)
    assert "个人" in err.value.message and "2" in err.value.message


def test_fractional_leases_count_their_fraction(pool: dict[str, Any]) -> None:
    set_limit(pool, "alice", 1)
    order(pool, gpu_count=1, gpu_milli=500)
    order(pool, gpu_count=1, gpu_milli=375)
    with pytest.raises(services.MemberLimitExceeded) as err:
        order(pool, gpu_count=1, gpu_milli=250)
    assert "0.875" in err.value.message
    order(pool, gpu_count=1, gpu_milli=125)  # 0.5 + 0.375 + 0.125 = 1


def test_ended_and_cancelled_leases_do_not_count(pool: dict[str, Any]) -> None:
    set_limit(pool, "alice", 8)
    waiting = order(pool, gpu_count=8)
    services.lease_cancel(actor=pool["alice"], lease=waiting)
    running = order(pool, gpu_count=8)
    drive()
    running.refresh_from_db()
    assert running.state == "active"
    with pytest.raises(services.MemberLimitExceeded):
        order(pool, gpu_count=1)
    services.lease_release(actor=pool["alice"], lease=running)
    drive()
    running.refresh_from_db()
    assert running.state == "ended"
    assert order(pool, gpu_count=8).state == "queued"


def test_extension_is_not_checked(pool: dict[str, Any]) -> None:
    set_limit(pool, "alice", 4)
    lease = order(pool, gpu_count=4)
    drive()
    lease.refresh_from_db()
    assert lease.state == "active"
    services.lease_extend(actor=pool["alice"], lease=lease, end_at=lease.end_at
                          + timedelta(hours=1))


def test_member_without_a_limit_is_unaffected(pool: dict[str, Any]) -> None:
    set_limit(pool, "ann", 1)  # someone else's limit changes nothing for alice
    assert membership(pool, "alice").max_gpus is None
    for _ in range(3):
        order(pool, gpu_count=8)
    assert Lease.objects.filter(created_by=pool["alice"], state="queued").count() == 3


def test_other_members_leases_do_not_count(pool: dict[str, Any]) -> None:
    set_limit(pool, "alice", 8)
    order(pool, who="ann", gpu_count=8)
    order(pool, who="adam", gpu_count=4)
    order(pool, gpu_count=8)


def test_api_key_orders_count_for_the_keys_user(pool: dict[str, Any]) -> None:
    set_limit(pool, "alice", 4)
    issued = tenant_services.api_key_create(actor=pool["alice"], name="ci", tenant=pool["a"])
    api = client_for(None)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.secret}")
    body = {"models": ["H100"], "gpu_count": 2, "duration_hours": "2"}
    assert api.post("/api/v1/orders", body, format="json").status_code == 201
    with pytest.raises(services.MemberLimitExceeded):  # the key's lease counts in the portal
        order(pool, gpu_count=4)
    order(pool, gpu_count=2)
    refused = api.post("/api/v1/orders", {**body, "gpu_count": 1}, format="json")
    assert refused.status_code == 400, refused.content
    assert refused.json()["error"] == "order_rejected"
    assert list(refused.json()["fields"]) == ["gpu_count"]
    mine = Lease.objects.filter(created_by=pool["alice"])
    assert mine.exclude(state="rejected").count() == 2
    assert mine.filter(state="rejected").count() == 1  # the refusal is kept (ADR 0132)


def test_quote_shows_the_same_refusal(pool: dict[str, Any]) -> None:
    set_limit(pool, "alice", 4)
    order(pool, gpu_count=4)
    quote = quoting.order_quote(actor=pool["alice"], tenant=pool["a"], spec=spec(gpu_count=2))
    assert not quote.fits_quota and quote.fits_budget
    with pytest.raises(services.MemberLimitExceeded) as err:
        order(pool, gpu_count=2)
    assert quote.messages == [err.value.message]
    other = quoting.order_quote(actor=pool["ann"], tenant=pool["a"], spec=spec(gpu_count=2))
    assert other.fits_quota and other.messages == []


# --- management: service, API, page ---------------------------------------------------

@pytest.mark.parametrize("actor", ["olga", "adam"])
def test_owner_and_admin_set_and_clear_with_an_audit_record(pool: dict[str, Any],
                                                            actor: str) -> None:
    m = tenant_services.membership_set_limit(actor=pool[actor], membership=membership(
        pool, "alice"), max_gpus=6)
    assert m.max_gpus == 6 and membership(pool, "alice").max_gpus == 6
    tenant_services.membership_set_limit(actor=pool[actor], membership=m, max_gpus=None)
    assert membership(pool, "alice").max_gpus is None
    entries = list(AuditLog.objects.filter(action="membership.limit").order_by("id")
                   .values_list("actor_repr", "tenant_id", "object_id", "changes"))
    assert entries == [
        (actor, pool["a"].pk, str(m.pk), {"user": "alice", "max_gpus": [None, 6]}),
        (actor, pool["a"].pk, str(m.pk), {"user": "alice", "max_gpus": [6, None]})]


@pytest.mark.parametrize("actor", ["alice", "vic"])
def test_members_and_viewers_cannot_set_limits(pool: dict[str, Any], actor: str) -> None:
    with pytest.raises(PermissionDenied):
        tenant_services.membership_set_limit(actor=pool[actor], membership=membership(
            pool, actor), max_gpus=100)
    assert membership(pool, actor).max_gpus is None
    assert not AuditLog.objects.filter(action="membership.limit").exists()


@pytest.mark.parametrize("bad", [-1, 1.5, "4", True, 10**9])
def test_service_validates_the_limit(pool: dict[str, Any], bad: Any) -> None:
    with pytest.raises(ApplicationError) as err:
        tenant_services.membership_set_limit(actor=pool["adam"], membership=membership(
            pool, "alice"), max_gpus=bad)
    assert list(err.value.fields) == ["max_gpus"]


def test_api_exposes_and_patches_the_limit(pool: dict[str, Any]) -> None:
    admin = client_for(pool["adam"])
    url = api_url(pool, "alice")
    response = admin.patch(url, {"max_gpus": 4}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["max_gpus"] == 4 and response.json()["role"] == "member"
    listed = client_for(pool["vic"]).get(
        reverse("membership-list", kwargs={"tenant_slug": "a"})).json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert {r["username"]: r["max_gpus"] for r in rows}["alice"] == 4
    both = admin.patch(url, {"max_gpus": None, "role": "viewer"}, format="json")
    assert both.status_code == 200 and both.json()["max_gpus"] is None
    assert both.json()["role"] == "viewer"
    assert membership(pool, "alice").max_gpus is None


@pytest.mark.parametrize("body", [{"max_gpus": -1}, {"max_gpus": "abc"}, {"max_gpus": 1.5},
                                  {"max_gpus": 10**9}])
def test_api_rejects_bad_limits_naming_the_field(pool: dict[str, Any],
                                                 body: dict[str, Any]) -> None:
    response = client_for(pool["adam"]).patch(api_url(pool, "alice"), body, format="json")
    assert response.status_code == 400, response.content
    assert list(response.json()["fields"]) == ["max_gpus"]
    assert membership(pool, "alice").max_gpus is None


def test_api_empty_patch_is_a_400(pool: dict[str, Any]) -> None:
    response = client_for(pool["adam"]).patch(api_url(pool, "alice"), {}, format="json")
    assert response.status_code == 400


def test_api_refuses_members_and_strangers(pool: dict[str, Any]) -> None:
    url = api_url(pool, "ann")
    assert client_for(pool["alice"]).patch(url, {"max_gpus": 1},
                                           format="json").status_code == 403
    assert client_for(pool["vic"]).patch(url, {"max_gpus": 1}, format="json").status_code == 403
    assert client_for(pool["bob"]).patch(url, {"max_gpus": 1}, format="json").status_code == 404
    # b's admin cannot reach a's member through b's URL either
    other = api_url(pool, "ann").replace("/tenants/a/", "/tenants/b/")
    assert client_for(pool["bob"]).patch(other, {"max_gpus": 1},
                                         format="json").status_code == 404
    assert membership(pool, "ann").max_gpus is None


def test_members_page_shows_limit_and_use_and_sets_it(pool: dict[str, Any]) -> None:
    set_limit(pool, "alice", 8)
    order(pool, gpu_count=1, gpu_milli=500)
    order(pool, gpu_count=2)
    page = page_client(pool["alice"]).get("/tenant/members/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Personal GPU limit" in html and "2.5" in html and "No limit" in html
    assert "/limit/" not in html  # a member sees the limits, has no form

    adam = page_client(pool["adam"])
    m = membership(pool, "ann")
    field = f"limit-{m.pk}-max_gpus"
    assert f'name="{field}"' in adam.get("/tenant/members/").content.decode()
    url = f"/tenant/members/{m.pk}/limit/"
    done = adam.post(url, {field: "3"})
    assert done.status_code == 302 and membership(pool, "ann").max_gpus == 3
    cleared = adam.post(url, {field: ""})
    assert cleared.status_code == 302 and membership(pool, "ann").max_gpus is None
    for bad in ("-1", "abc", "1000000000"):
        refused = adam.post(url, {field: bad})
        assert refused.status_code == 400, bad
        assert f'id="id_{field}_error"' in refused.content.decode(), bad
        assert membership(pool, "ann").max_gpus is None
    assert page_client(pool["alice"]).post(url, {field: "1"}).status_code == 403
    assert membership(pool, "ann").max_gpus is None


# --- concurrency (PostgreSQL) ---------------------------------------------------------

@pytest.mark.services("postgres")
@pytest.mark.django_db(transaction=True)
def test_concurrent_orders_of_one_member_respect_the_limit(pool: dict[str, Any]) -> None:
    """6 threads of one member (limit 8) order 4 GPUs each: the tenant lock serialises them,
    so each sees the others' committed leases and only two pass."""
    set_limit(pool, "alice", 8)

    def one(i: int) -> str:
        try:
            order(pool, gpu_count=4, name=f"t{i}")
        except services.MemberLimitExceeded:
            return "refused"
        return "ok"

    outcomes = in_threads(6, one)
    assert sorted(outcomes) == ["ok"] * 2 + ["refused"] * 4
    assert Lease.objects.filter(created_by=pool["alice"]).count() == 2
