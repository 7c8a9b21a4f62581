"""Console tenant page: quotas, contract prices and credits, staff-only and audited."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from portal.billing.models import CreditLine, Invoice, TenantContract
from portal.console import services
from portal.console.forms import next_hour
from portal.console.quotas import CONFIRM, quota_set
from portal.core import clock
from portal.core.errors import ApplicationError, PermissionDenied
from portal.core.models import AuditLog
from portal.inventory.generator import ClusterSpec, cluster_generate
from portal.inventory.models import Node
from portal.leasing.models import SLOTS_PER_GPU, Allocation, Quota
from portal.tenants.models import Role
from tests.portal.billing.builders import make_lease
from tests.portal.factories import add_member, make_tenant, make_user


@pytest.fixture
def world(db: Any) -> dict[str, Any]:
    tenant = make_tenant("a")
    member = add_member(tenant, "a-member", Role.OWNER)
    staff = make_user("ops", staff=True)
    cluster_generate(actor=None, spec=ClusterSpec(nodes=2, gpus_per_node=2))
    node = Node.objects.order_by("hostname").first()
    assert node is not None
    now = clock.now()
    lease = make_lease(tenant, active_at=now - timedelta(hours=1), end_at=now + timedelta(hours=2),
                       name="busy-lease", gpu_count=2)
    for gpu in node.gpus.all():  # two whole H100s held right now
        Allocation.objects.bulk_create(
            Allocation(lease=lease, gpu=gpu, node=node, slot=s, start_at=lease.start_at,
                       end_at=lease.end_at) for s in range(SLOTS_PER_GPU))
    return {"tenant": tenant, "member": member, "staff": staff, "lease": lease,
            "url": reverse("console:tenant", args=[tenant.slug])}


def login(user: Any, **kwargs: Any) -> Client:
    client = Client(**kwargs)
    if user is not None:
        client.force_login(user)
    return client


def hour(days: int = 1) -> datetime:
    return next_hour() + timedelta(days=days)


def local(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M")


def quota_post(**values: Any) -> dict[str, Any]:
    data = {"form": "quota", "quota-gpu_model": "H100", "quota-max_gpus": "8",
            "quota-guaranteed_gpus": "2", "quota-gpu_hour_budget": "1000",
            "quota-max_lease_hours": "72", "quota-max_pending_orders": "5",
            "quota-allow_spot": "on", "quota-reason": "contract signed"}
    data.update({f"quota-{k}": v for k, v in values.items()})
    return {k: v for k, v in data.items() if v is not None}


def contract_post(**values: Any) -> dict[str, Any]:
    data = {"form": "contract", "contract-gpu_model": "H100", "contract-priority": "on_demand",
            "contract-unit_price": "1.5000", "contract-discount_percent": "",
            "contract-effective_from": local(hour()), "contract-effective_to": "",
            "contract-reference": "MSA-7"}
    data.update({f"contract-{k}": v for k, v in values.items()})
    return data


def credit_post(**values: Any) -> dict[str, Any]:
    today = clock.now().date()
    data = {"form": "credit", "credit-category": "Credit", "credit-amount": "-25.00",
            "credit-description": "outage on node 3", "credit-period_start": str(today),
            "credit-period_end": str(today)}
    data.update({f"credit-{k}": v for k, v in values.items()})
    return data


def snapshot() -> tuple[Any, ...]:
    return (list(Quota.objects.order_by("pk").values()),
            TenantContract.objects.count(), CreditLine.objects.count(),
            AuditLog.objects.exclude(action__startswith="auth.").count())


# -- viewing --------------------------------------------------------------------------------

def test_tenants_list_links_to_the_tenant_page(world: dict[str, Any]) -> None:
    text = login(world["staff"]).get(reverse("console:tenants")).content.decode()
    assert f'href="{world["url"]}"' in text


def test_tenant_page_shows_quotas_budget_contracts_credits_invoices(
        world: dict[str, Any], django_assert_max_num_queries: Any) -> None:
    tenant, staff = world["tenant"], world["staff"]
    quota_set(actor=staff, tenant=tenant, gpu_model="H100", max_gpus=8, guaranteed_gpus=2,
              gpu_hour_budget=None, max_lease_hours=72)
    quota_set(actor=staff, tenant=tenant, gpu_model="", max_gpus=4, guaranteed_gpus=0,
              gpu_hour_budget=Decimal("500"), max_lease_hours=24)
    services.contract_add(actor=staff, tenant=tenant, effective_from=hour(),
                          discount_percent=Decimal("12.5"), reference="MSA-42")
    now = clock.now()
    services.credit_add(actor=staff, tenant=tenant, amount=Decimal("-9.99"),
                        description="goodwill", period_start=now - timedelta(hours=2),
                        period_end=now)
    Invoice.objects.create(tenant=tenant, month=now.date().replace(day=1), currency="USD",
                           total=Decimal("123.45"))
    client = login(staff)
    client.get(world["url"])  # warm the session and caches
    with django_assert_max_num_queries(20):
        response = client.get(world["url"])
    assert response.status_code == 200
    text = response.content.decode()
    for expected in ("MSA-42", "12.50%", "goodwill", "-9.99", "123.45", "500.00",
                     "All models", 'name="csrfmiddlewaretoken"', 'name="quota-max_gpus"',
                     'name="contract-effective_from"', 'name="credit-amount"'):
        assert expected in text, expected
    rows = {r["quota"].gpu_model: r["in_use"] for r in response.context["quotas"]}
    assert rows == {"H100": Decimal(2), "": Decimal(0)}  # H100 has its own row


def test_query_count_does_not_grow_with_rows(world: dict[str, Any],
                                             django_assert_max_num_queries: Any) -> None:
    tenant, staff = world["tenant"], world["staff"]
    for i in range(15):
        services.contract_add(actor=staff, tenant=tenant, effective_from=hour(i + 1),
                              unit_price=Decimal(i), reference=f"r{i}")
        services.credit_add(actor=staff, tenant=tenant, amount=Decimal(-1 - i),
                            description=f"c{i}", period_start=clock.now() - timedelta(days=1),
                            period_end=clock.now())
    client = login(staff)
    client.get(world["url"])
    with django_assert_max_num_queries(20):
        assert client.get(world["url"]).status_code == 200


def test_edit_link_fills_the_quota_form(world: dict[str, Any]) -> None:
    quota_set(actor=world["staff"], tenant=world["tenant"], gpu_model="H100", max_gpus=6,
              guaranteed_gpus=3, gpu_hour_budget=Decimal("77.5"), max_lease_hours=48)
    response = login(world["staff"]).get(world["url"], {"edit": "H100"})
    form = response.context["quota_form"]
    assert form["max_gpus"].value() == 6 and form["guaranteed_gpus"].value() == 3
    assert '?edit=H100' in response.content.decode()


def test_unknown_tenant_is_404(world: dict[str, Any]) -> None:
    assert login(world["staff"]).get(reverse("console:tenant", args=["nope"])).status_code == 404


# -- writing --------------------------------------------------------------------------------

def test_staff_creates_then_updates_a_quota_with_audit(world: dict[str, Any]) -> None:
    client, tenant = login(world["staff"]), world["tenant"]
    response = client.post(world["url"], quota_post())
    assert response.status_code == 302 and response["Location"] == world["url"]
    quota = Quota.objects.get(tenant=tenant, gpu_model="H100")
    assert (quota.max_gpus, quota.guaranteed_gpus, quota.gpu_hour_budget,
            quota.max_lease_hours, quota.max_pending_orders, quota.allow_spot,
            quota.allow_borrowing) == (8, 2, Decimal("1000.00"), 72, 5, True, False)
    entry = AuditLog.objects.get(action="quota.create")
    assert entry.tenant == tenant and entry.actor == world["staff"]
    assert entry.changes["max_gpus"] == [None, 8] and entry.changes["reason"] == "contract signed"

    client.post(world["url"], quota_post(max_gpus="10", gpu_hour_budget=""))
    quota.refresh_from_db()
    assert quota.max_gpus == 10 and quota.gpu_hour_budget is None
    update = AuditLog.objects.get(action="quota.update")
    assert update.changes["max_gpus"] == [8, 10]
    assert update.changes["gpu_hour_budget"] == ["1000.00", None]
    assert "guaranteed_gpus" not in update.changes

    client.post(world["url"], quota_post(max_gpus="10", gpu_hour_budget=""))  # no change
    assert AuditLog.objects.filter(action__startswith="quota.").count() == 2


def test_tenant_wide_quota_row(world: dict[str, Any]) -> None:
    login(world["staff"]).post(world["url"], quota_post(gpu_model="", max_gpus="16"))
    assert Quota.objects.get(tenant=world["tenant"], gpu_model="").max_gpus == 16


def test_lowering_max_gpus_below_use_needs_confirmation(world: dict[str, Any]) -> None:
    client, tenant = login(world["staff"]), world["tenant"]
    client.post(world["url"], quota_post(max_gpus="8"))
    before = snapshot()
    response = client.post(world["url"], quota_post(max_gpus="1", guaranteed_gpus="0"))
    assert response.status_code == 200
    assert response.context["confirm_quota"] is True
    errors = response.context["quota_form"].errors
    assert "not preempted" in errors["max_gpus"][0]
    assert 'name="quota-confirm"' in response.content.decode()
    assert snapshot() == before  # nothing happened

    response = client.post(world["url"], quota_post(max_gpus="1", guaranteed_gpus="0",
                                                    confirm="on"), follow=True)
    assert response.status_code == 200
    assert Quota.objects.get(tenant=tenant, gpu_model="H100").max_gpus == 1
    assert "not preempted" in response.content.decode()  # the warning is shown after saving
    entry = AuditLog.objects.get(action="quota.update")
    assert "max_gpus" in entry.changes["below_current_use"]
    # The lease keeps its GPUs.
    assert Allocation.objects.filter(lease=world["lease"], live=True).count() == 2 * SLOTS_PER_GPU


def test_tenant_wide_row_counts_models_without_their_own_row(world: dict[str, Any]) -> None:
    staff, tenant = world["staff"], world["tenant"]
    with pytest.raises(ApplicationError) as caught:
        quota_set(actor=staff, tenant=tenant, gpu_model="", max_gpus=1, guaranteed_gpus=0,
                  gpu_hour_budget=None, max_lease_hours=24)
    assert caught.value.code == CONFIRM and "max_gpus" in caught.value.fields
    quota_set(actor=staff, tenant=tenant, gpu_model="H100", max_gpus=4, guaranteed_gpus=0,
              gpu_hour_budget=None, max_lease_hours=24)
    change = quota_set(actor=staff, tenant=tenant, gpu_model="", max_gpus=1, guaranteed_gpus=0,
                       gpu_hour_budget=None, max_lease_hours=24)
    assert change.created and change.warnings == []  # H100 is limited by its own row


def test_lowering_the_budget_below_this_months_hours_warns(world: dict[str, Any]) -> None:
    staff, tenant = world["staff"], world["tenant"]
    quota_set(actor=staff, tenant=tenant, gpu_model="", max_gpus=8, guaranteed_gpus=0,
              gpu_hour_budget=Decimal(1000), max_lease_hours=24)
    with pytest.raises(ApplicationError) as caught:
        quota_set(actor=staff, tenant=tenant, gpu_model="", max_gpus=8, guaranteed_gpus=0,
                  gpu_hour_budget=Decimal("0.5"), max_lease_hours=24)
    assert caught.value.code == CONFIRM and "gpu_hour_budget" in caught.value.fields
    change = quota_set(actor=staff, tenant=tenant, gpu_model="", max_gpus=8, guaranteed_gpus=0,
                       gpu_hour_budget=Decimal("0.5"), max_lease_hours=24, confirm=True)
    assert change.warnings and Quota.objects.get(gpu_model="").gpu_hour_budget == Decimal("0.50")


def test_staff_adds_a_contract_price_audited_once(world: dict[str, Any]) -> None:
    start = hour()
    response = login(world["staff"]).post(world["url"], contract_post(
        effective_from=local(start), effective_to=local(start + timedelta(days=30))))
    assert response.status_code == 302
    contract = TenantContract.objects.get(tenant=world["tenant"])
    assert (contract.gpu_model, contract.priority, contract.unit_price, contract.reference,
            contract.effective_from, contract.effective_to) == (
        "H100", "on_demand", Decimal("1.5"), "MSA-7", start, start + timedelta(days=30))
    entries = AuditLog.objects.filter(object_type="billing.tenantcontract")
    assert [e.action for e in entries] == ["billing.contract_create"]
    assert entries[0].actor == world["staff"] and entries[0].tenant == world["tenant"]


def test_staff_adds_a_discount(world: dict[str, Any]) -> None:
    login(world["staff"]).post(world["url"], contract_post(
        gpu_model="", priority="", unit_price="", discount_percent="15"))
    contract = TenantContract.objects.get(tenant=world["tenant"])
    assert contract.unit_price is None and contract.discount_percent == Decimal(15)
    assert contract.gpu_model == "" and contract.priority == ""


def test_staff_adds_a_credit_line_audited_once(world: dict[str, Any]) -> None:
    response = login(world["staff"]).post(world["url"], credit_post())
    assert response.status_code == 302
    line = CreditLine.objects.get(tenant=world["tenant"])
    today = clock.now().date()
    assert line.amount == Decimal("-25.00") and line.kind == "manual"
    assert line.created_by == world["staff"] and line.description == "outage on node 3"
    assert line.period_start == datetime.combine(today, datetime.min.time(), tzinfo=UTC)
    assert line.period_end == line.period_start + timedelta(days=1)
    entries = AuditLog.objects.filter(object_type="billing.creditline")
    assert [e.action for e in entries] == ["billing.credit_create"]


def test_positive_adjustment_is_allowed(world: dict[str, Any]) -> None:
    login(world["staff"]).post(world["url"], credit_post(category="Adjustment", amount="40"))
    assert CreditLine.objects.get().amount == Decimal("40.00")


# -- who may --------------------------------------------------------------------------------

@pytest.mark.parametrize("who", ["member", "anonymous"])
def test_non_staff_can_neither_view_nor_change(world: dict[str, Any], who: str) -> None:
    client = login(world["member"] if who == "member" else None)
    before = snapshot()
    for response in [client.get(world["url"]), client.post(world["url"], quota_post()),
                     client.post(world["url"], contract_post()),
                     client.post(world["url"], credit_post())]:
        if who == "member":
            assert response.status_code == 403
        else:
            assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    assert snapshot() == before


def test_services_refuse_non_staff(world: dict[str, Any]) -> None:
    tenant, member = world["tenant"], world["member"]
    with pytest.raises(PermissionDenied):
        quota_set(actor=member, tenant=tenant, gpu_model="H100", max_gpus=1,
                  guaranteed_gpus=0, gpu_hour_budget=None, max_lease_hours=1)
    with pytest.raises(PermissionDenied):
        services.contract_add(actor=member, tenant=tenant, effective_from=hour(),
                              discount_percent=Decimal(10))
    with pytest.raises(PermissionDenied):
        services.credit_add(actor=None, tenant=tenant, amount=Decimal(-1), description="x",
                            period_start=clock.now() - timedelta(hours=1),
                            period_end=clock.now())
    assert Quota.objects.count() == TenantContract.objects.count() == 0
    assert CreditLine.objects.count() == 0


def test_posts_need_a_csrf_token(world: dict[str, Any]) -> None:
    client = login(world["staff"], enforce_csrf_checks=True)
    before = snapshot()
    assert client.post(world["url"], quota_post()).status_code == 403
    assert snapshot() == before


# -- bad input ------------------------------------------------------------------------------

BAD = [
    ("quota", quota_post(max_gpus="-1"), "max_gpus"),
    ("quota", quota_post(max_gpus="lots"), "max_gpus"),
    ("quota", quota_post(max_gpus=""), "max_gpus"),
    ("quota", quota_post(max_gpus="99999999999999999999"), "max_gpus"),
    ("quota", quota_post(guaranteed_gpus="-3"), "guaranteed_gpus"),
    ("quota", quota_post(max_gpus="2", guaranteed_gpus="3"), "guaranteed_gpus"),
    ("quota", quota_post(gpu_model="TPU-v9"), "gpu_model"),
    ("quota", quota_post(gpu_hour_budget="-5"), "gpu_hour_budget"),
    ("quota", quota_post(gpu_hour_budget="NaN"), "gpu_hour_budget"),
    ("quota", quota_post(gpu_hour_budget="Infinity"), "gpu_hour_budget"),
    ("quota", quota_post(gpu_hour_budget="1.234"), "gpu_hour_budget"),
    ("quota", quota_post(gpu_hour_budget="1e30"), "gpu_hour_budget"),
    ("quota", quota_post(max_lease_hours="0"), "max_lease_hours"),
    ("quota", quota_post(max_lease_hours="1.5"), "max_lease_hours"),
    ("quota", quota_post(max_pending_orders="-1"), "max_pending_orders"),
    ("contract", contract_post(effective_from="tomorrow-ish"), "effective_from"),
    ("contract", contract_post(effective_from="2020-01-01T00:00"), "effective_from"),
    ("contract", contract_post(effective_from=local(hour() + timedelta(minutes=30))),
     "effective_from"),
    ("contract", contract_post(effective_from=""), "effective_from"),
    ("contract", contract_post(effective_to=local(hour() - timedelta(hours=1))), "effective_to"),
    ("contract", contract_post(effective_to=local(hour() + timedelta(minutes=90))),
     "effective_to"),
    ("contract", contract_post(effective_from="9999-12-31T23:00"), "effective_from"),
    ("contract", contract_post(effective_to="9999-12-31T23:00"), "effective_to"),
    ("contract", contract_post(unit_price="abc"), "unit_price"),
    ("contract", contract_post(unit_price="-1"), "unit_price"),
    ("contract", contract_post(unit_price="1e20"), "unit_price"),
    ("contract", contract_post(unit_price=""), "unit_price"),
    ("contract", contract_post(discount_percent="10"), "discount_percent"),
    ("contract", contract_post(unit_price="", discount_percent="150"), "discount_percent"),
    ("contract", contract_post(unit_price="", discount_percent="-5"), "discount_percent"),
    ("contract", contract_post(gpu_model="TPU-v9"), "gpu_model"),
    ("contract", contract_post(priority="platinum"), "priority"),
    ("contract", contract_post(reference="x" * 101), "reference"),
    ("credit", credit_post(amount="ten"), "amount"),
    ("credit", credit_post(amount="25"), "amount"),
    ("credit", credit_post(amount="0"), "amount"),
    ("credit", credit_post(amount="-0.001"), "amount"),
    ("credit", credit_post(amount="-1e20"), "amount"),
    ("credit", credit_post(description=""), "description"),
    ("credit", credit_post(description="x" * 301), "description"),
    ("credit", credit_post(period_start="2024-02-30"), "period_start"),
    ("credit", credit_post(period_end="yesterday"), "period_end"),
    ("credit", credit_post(period_start="9999-12-31", period_end="9999-12-31"), "period_end"),
    ("credit", credit_post(period_start="2024-05-02", period_end="2024-05-01"), "period_end"),
    ("credit", credit_post(category="Gift"), "category"),
]


@pytest.mark.parametrize(("form", "data", "field"), BAD,
                         ids=[f"{f}-{field}-{i}" for i, (f, _, field) in enumerate(BAD)])
def test_bad_input_shows_field_errors_and_changes_nothing(
        world: dict[str, Any], form: str, data: dict[str, Any], field: str) -> None:
    before = snapshot()
    response = login(world["staff"]).post(world["url"], data)
    assert response.status_code == 200
    assert field in response.context[f"{form}_form"].errors
    assert f'id="id_{form}-{field}_error"' in response.content.decode()
    assert snapshot() == before


def test_unknown_form_changes_nothing(world: dict[str, Any]) -> None:
    before = snapshot()
    response = login(world["staff"]).post(world["url"], {"form": "evil", "quota-max_gpus": "1"})
    assert response.status_code == 302
    assert snapshot() == before


# -- services directly (types the forms never send) -----------------------------------------

@pytest.mark.parametrize(("kwargs", "field"), [
    ({"max_gpus": "8"}, "max_gpus"),
    ({"max_gpus": True}, "max_gpus"),
    ({"max_gpus": 3_000_000_000}, "max_gpus"),
    ({"guaranteed_gpus": -1}, "guaranteed_gpus"),
    ({"gpu_hour_budget": "abc"}, "gpu_hour_budget"),
    ({"gpu_hour_budget": Decimal("-1")}, "gpu_hour_budget"),
    ({"max_lease_hours": 0}, "max_lease_hours"),
    ({"gpu_model": "A100"}, "gpu_model"),
    ({"gpu_model": None}, "gpu_model"),
])
def test_quota_set_validates(world: dict[str, Any], kwargs: dict[str, Any], field: str) -> None:
    values = {"gpu_model": "H100", "max_gpus": 8, "guaranteed_gpus": 0,
              "gpu_hour_budget": None, "max_lease_hours": 24, **kwargs}
    with pytest.raises(ApplicationError) as caught:
        quota_set(actor=world["staff"], tenant=world["tenant"], **values)
    assert field in caught.value.fields
    assert not Quota.objects.exists() and not AuditLog.objects.filter(
        action__startswith="quota.").exists()


def test_contract_and_credit_services_validate(world: dict[str, Any]) -> None:
    staff, tenant, now = world["staff"], world["tenant"], clock.now()
    cases = [
        (lambda: services.contract_add(actor=staff, tenant=tenant, effective_from=hour(),
                                       discount_percent=Decimal("NaN")), "discount_percent"),
        (lambda: services.contract_add(actor=staff, tenant=tenant,
                                       effective_from=hour().replace(tzinfo=None),
                                       unit_price=Decimal(1)), "effective_from"),
        (lambda: services.contract_add(actor=staff, tenant=tenant, effective_from=hour(),
                                       effective_to=hour(), unit_price=Decimal(1)),
         "effective_to"),
        (lambda: services.credit_add(actor=staff, tenant=tenant, amount=Decimal(-1),
                                     description="x", period_start=now, period_end=now),
         "period_end"),
        (lambda: services.credit_add(actor=staff, tenant=tenant, amount=Decimal(-1),
                                     description="  ", period_start=now - timedelta(hours=1),
                                     period_end=now), "description"),
    ]
    for call, field in cases:
        with pytest.raises(ApplicationError) as caught:
            call()
        assert field in caught.value.fields, field
    assert TenantContract.objects.count() == CreditLine.objects.count() == 0
