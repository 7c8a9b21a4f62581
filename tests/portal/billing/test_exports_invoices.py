from __future__ import annotations

import csv
import io
import json
import re
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core.management import call_command
from django.urls import reverse

from portal.billing import services
from portal.billing.focus import COLUMNS, DECIMAL_COLUMNS, MANDATORY
from portal.billing.metering import meter_leases
from portal.billing.models import BudgetAlert, CreditLine, Invoice, UsageRecord
from portal.billing.selectors import budget_usage
from portal.core import clock
from portal.core.errors import ApplicationError, Conflict
from portal.leasing.models import LeaseState, Quota
from portal.tenants.models import Role
from tests.portal.billing.builders import make_lease
from tests.portal.factories import add_member, client_for, make_tenant

T0 = datetime(2026, 3, 30, 22, 15, tzinfo=UTC)
ZULU = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


@pytest.fixture
def billed(db: Any) -> dict[str, Any]:
    a, b = make_tenant("a"), make_tenant("b", currency="EUR")
    make_lease(a, active_at=T0, end_at=T0 + timedelta(hours=5), ended_at=T0 + timedelta(hours=4),
               priority="reserved", gpu_count=4, tags={"team": "nlp"}, name="train")
    make_lease(a, active_at=T0, end_at=T0 + timedelta(hours=3), ended_at=T0 + timedelta(hours=2),
               state=LeaseState.FAILED, gpu_milli=500)
    make_lease(b, active_at=T0, end_at=T0 + timedelta(hours=1), ended_at=T0 + timedelta(hours=1))
    meter_leases(until=T0 + timedelta(days=3))
    return {"a": a, "b": b}


def _focus(tenant: Any, fmt: str = "focus-csv") -> str:
    out = io.StringIO()
    call_command("export_usage", format=fmt, tenant=tenant.slug, start="2026-03-01",
                 end="2026-03-31", stdout=out)
    return out.getvalue()


def test_focus_csv_is_valid_and_sums_to_the_invoice(billed: dict[str, Any]) -> None:
    a = billed["a"]
    rows = list(csv.DictReader(io.StringIO(_focus(a))))
    assert rows and set(MANDATORY) <= set(rows[0]) and list(rows[0]) == COLUMNS
    for row in rows:
        for name in ("BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart",
                     "ChargePeriodEnd"):
            assert ZULU.match(row[name]), (name, row[name])
        assert row["ChargePeriodStart"] < row["ChargePeriodEnd"]
        for name in DECIMAL_COLUMNS:
            if row[name]:
                Decimal(row[name])
        assert row["ChargeCategory"] in {"Usage", "Credit", "Adjustment"}
        assert row["ChargeClass"] in {"", "Correction"}
        assert row["BillingAccountId"] == str(a.id) and row["BillingCurrency"] == "USD"
    reserved = [r for r in rows if r["x_Priority"] == "reserved"]
    assert reserved and all(r["CapacityReservationStatus"] == "Used" for r in reserved)
    assert json.loads(reserved[0]["Tags"]) == {"team": "nlp"}
    assert any(r["ChargeCategory"] == "Credit" for r in rows)
    invoice = services.invoice_refresh(tenant=a, month=date(2026, 3, 1))
    march = sum(Decimal(r["BilledCost"]) for r in rows)
    assert march == invoice.total == Decimal("32.00")  # 4 GPUs x 4 h x 2.00; failure credited
    assert "b" not in {r["SubAccountId"] for r in rows}


def test_focus_jsonl_and_usage_csv(billed: dict[str, Any]) -> None:
    lines = _focus(billed["a"], "focus-jsonl").splitlines()
    records = [json.loads(x, parse_float=Decimal) for x in lines]
    assert all(set(COLUMNS) == set(r) for r in records)
    assert sum(r["BilledCost"] for r in records) == Decimal("32.00")
    usage = _focus(billed["a"], "csv").splitlines()
    assert usage[0].startswith("record_id,tenant,lease_id") and len(usage) == 1 + 5 + 3


def test_export_prints_the_header_with_no_rows(db: Any) -> None:
    tenant = make_tenant("empty")
    assert _focus(tenant).splitlines() == [",".join(COLUMNS)]


def test_api_export_is_tenant_scoped(billed: dict[str, Any]) -> None:
    user = add_member(billed["b"], "b-user", Role.VIEWER)
    response = client_for(user).get(reverse("billing-usage"), {"type": "csv"})
    body = b"".join(response.streaming_content).decode()
    assert response.status_code == 200 and ",b," in body and ",a," not in body
    denied = client_for(user).get(reverse("billing-usage"), {"type": "csv", "tenant": "a"})
    assert denied.status_code == 404


def test_failed_lease_is_credited_and_rerun_is_idempotent(billed: dict[str, Any]) -> None:
    credit = CreditLine.objects.get(kind="failure")
    assert credit.amount == -sum(r.cost for r in UsageRecord.objects.filter(lease=credit.lease))
    again = meter_leases(until=T0 + timedelta(days=4))
    assert again.as_dict() == {"leases": 0, "created": 0, "updated": 0, "deleted": 0,
                               "credits": 0}


def test_finalised_invoice_is_immutable(billed: dict[str, Any]) -> None:
    a = billed["a"]
    clock.freeze(T0 - timedelta(days=1))
    try:
        with pytest.raises(Conflict):
            services.invoice_finalize(actor=None, tenant=a, month=date(2026, 3, 1))
        clock.freeze(datetime(2026, 4, 2, tzinfo=UTC))
        invoice = services.invoice_finalize(actor=None, tenant=a, month=date(2026, 3, 1))
        assert invoice.status == Invoice.Status.FINAL
        line = services.credit_create(actor=None, tenant=a, amount=Decimal("-1.00"),
                                      description="goodwill", period_start=T0,
                                      period_end=T0 + timedelta(hours=1))
        assert line.month == date(2026, 4, 1) and line.source_month == date(2026, 3, 1)
        assert services.invoice_refresh(tenant=a, month=date(2026, 3, 1)).total == invoice.total
        with pytest.raises(ApplicationError):
            services.price_create(actor=None, gpu_model="", priority="spot",
                                  unit_price=Decimal(1), effective_from=T0.replace(minute=0))
    finally:
        clock.reset()


def test_budget_warns_at_80_percent(billed: dict[str, Any]) -> None:
    a = billed["a"]
    Quota.objects.create(tenant=a, gpu_hour_budget=Decimal("20"), max_gpus=8)
    usage = budget_usage(tenant=a, month=date(2026, 3, 1))
    assert usage["warn"] and not usage["exceeded"]  # 17 of 20 GPU-hours (failed lease incl.)
    services.budget_check(tenant=a, month=date(2026, 3, 1))
    services.budget_check(tenant=a, month=date(2026, 3, 1))
    assert list(BudgetAlert.objects.values_list("threshold", flat=True)) == [80]


def test_a_new_budget_alert_is_announced_once_after_commit(
        billed: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
        django_capture_on_commit_callbacks: Any) -> None:
    from portal.billing import hooks

    heard: list[hooks.BudgetNews] = []
    monkeypatch.setattr(hooks.budget_alert, "_receivers", [heard.append])
    a = billed["a"]
    Quota.objects.create(tenant=a, gpu_hour_budget=Decimal("20"), max_gpus=8)
    with django_capture_on_commit_callbacks(execute=True):
        services.budget_check(tenant=a, month=date(2026, 3, 1))
        assert heard == []  # not before the alert row commits
    with django_capture_on_commit_callbacks(execute=True):
        services.budget_check(tenant=a, month=date(2026, 3, 1))
    assert [(n.event, n.tenant_id, n.threshold, n.month) for n in heard] == [
        ("budget.alert", str(a.pk), 80, "2026-03")]
