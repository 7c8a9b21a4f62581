"""Finding 4 (issue 13): invoices and exports on the tenant side.

Old code: the usage page said "Invoices and usage records will appear here" while a draft
invoice existed, and exports were reachable only by typing ``/billing/export/?type=…``.
"""

from __future__ import annotations

import csv
import io
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.urls import reverse

from portal.billing import selectors, services
from portal.billing.metering import meter_leases
from portal.billing.models import CreditLine, Invoice
from portal.core import clock
from portal.tenants.models import Role
from tests.portal.billing.builders import make_lease
from tests.portal.factories import add_member
from tests.portal.web.conftest import client_for, frozen_clock, pool, run_on_commit

__all__ = ["frozen_clock", "pool", "run_on_commit"]

MONTH = date(2026, 11, 1)


@pytest.fixture
def billed(pool: dict[str, Any], frozen_clock: datetime) -> Invoice:
    """Tenant a: 4 × H100 for 90 minutes, metered; a manual credit; the month's draft."""
    start = frozen_clock - timedelta(hours=2)
    make_lease(pool["a"], active_at=start, end_at=start + timedelta(minutes=90),
               ended_at=start + timedelta(minutes=90), gpu_count=4, name="train-42")
    meter_leases(until=clock.now())
    CreditLine.objects.create(tenant=pool["a"], month=MONTH, source_month=MONTH,
                              category=CreditLine.Category.CREDIT, amount=Decimal("-1.00"),
                              currency="USD", description="goodwill",
                              period_start=start, period_end=frozen_clock)
    return services.invoice_refresh(tenant=pool["a"], month=MONTH)


def test_tenant_billing_page_lists_the_draft_invoice_with_totals(billed: Invoice,
                                                                 pool: dict[str, Any]) -> None:
    body = client_for(pool["adam"]).get(reverse("web:usage")).content.decode()
    assert "Invoices and usage records will appear here" not in body
    assert 'data-testid="invoices"' in body and "2026-11" in body and "Draft" in body
    assert "14.00 USD" in body  # 4 GPUs × 1.5 h × 2.50 = 15.00, minus a 1.00 credit
    assert reverse("billing:invoice", kwargs={"year": 2026, "month": 11}) in body
    assert reverse("billing:invoice_csv", kwargs={"year": 2026, "month": 11}) in body


def test_tenant_billing_page_links_the_exports_for_admins(billed: Invoice,
                                                          pool: dict[str, Any]) -> None:
    admin = client_for(pool["adam"])
    body = admin.get(reverse("web:usage")).content.decode()
    for kind in ("csv", "focus-csv", "focus-jsonl"):
        url = f"/billing/export/?type={kind}&amp;from=2026-11-01&amp;to=2026-12-01"
        assert url in body, kind
        response = admin.get(url.replace("&amp;", "&"))
        assert response.status_code == 200
        assert b"train-42" in b"".join(response.streaming_content) or kind != "csv"


def test_tenant_billing_page_members_see_no_invoices(billed: Invoice,
                                                     pool: dict[str, Any]) -> None:
    body = client_for(pool["alice"]).get(reverse("web:usage")).content.decode()
    assert 'data-testid="invoices"' not in body and 'data-testid="exports"' not in body
    url = reverse("billing:invoice_csv", kwargs={"year": 2026, "month": 11})
    assert client_for(pool["alice"]).get(url).status_code == 403


def test_tenant_billing_invoice_csv_lines_add_up_to_the_total(billed: Invoice,
                                                              pool: dict[str, Any]) -> None:
    url = reverse("billing:invoice_csv", kwargs={"year": 2026, "month": 11})
    response = client_for(pool["adam"]).get(url)
    assert response.status_code == 200
    assert "draft" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    usage = [r for r in rows if r["kind"] == "usage"]
    assert [(r["description"], r["gpu_hours"], r["unit_price"], r["amount"])
            for r in usage] == [("train-42", "6.000", "2.5000", "15.00")]
    totals = {r["kind"]: Decimal(r["amount"]) for r in rows}
    assert totals["total"] == Decimal("14.00") == selectors.invoice_totals(
        tenant=pool["a"], month=MONTH)["total"]
    assert totals["credit"] == Decimal("-1.00")


def test_tenant_billing_invoice_printable_page(billed: Invoice, pool: dict[str, Any]) -> None:
    url = reverse("billing:invoice", kwargs={"year": 2026, "month": 11})
    body = client_for(pool["adam"]).get(url).content.decode()
    assert 'data-testid="invoice"' in body and "train-42" in body and "goodwill" in body
    assert "14.00 USD" in body and "2.5000 USD" in body


def test_tenant_billing_invoice_of_another_tenant_is_a_404(billed: Invoice,
                                                           pool: dict[str, Any]) -> None:
    url = reverse("billing:invoice", kwargs={"year": 2026, "month": 11})
    b_admin = client_for(add_member(pool["b"], "b-admin", Role.ADMIN))
    assert b_admin.get(url).status_code == 404
    assert client_for(pool["adam"]).get(
        reverse("billing:invoice", kwargs={"year": 2026, "month": 13})).status_code == 404
