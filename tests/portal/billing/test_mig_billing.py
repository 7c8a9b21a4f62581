"""Issue 28, billing: a MIG lease is metered in GPU equivalents (its instances' share,
ADR 0222), its FOCUS rows name the profile in the SKU and resource columns and count
instance-hours, and the invoice line names the profile with its instance-hours."""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.core.management import call_command

from portal.billing import services, statements
from portal.billing.metering import meter_leases
from portal.billing.models import UsageRecord
from portal.billing.pricing import PriceBook
from tests.portal.billing.builders import make_lease
from tests.portal.factories import make_tenant

T0 = datetime(2026, 3, 10, 10, 0, tzinfo=UTC)


def _billed() -> tuple[Any, Any, Any]:
    tenant = make_tenant("a")
    mig = make_lease(tenant, active_at=T0, end_at=T0 + timedelta(hours=2),
                     ended_at=T0 + timedelta(hours=2), mig_profile="1g.10gb", gpu_count=7,
                     gpu_milli=142, name="inference")
    whole = make_lease(tenant, active_at=T0, end_at=T0 + timedelta(hours=2),
                       ended_at=T0 + timedelta(hours=2), name="train")
    meter_leases(until=T0 + timedelta(days=1))
    return tenant, mig, whole


def test_a_mig_lease_is_billed_by_share_in_focus_rows(db: Any) -> None:
    tenant, mig, whole = _billed()
    rate = PriceBook(tenant).rate("H100", "on_demand", T0).unit_price
    mig_cost = sum(r.cost for r in UsageRecord.objects.filter(lease=mig))
    hourly = (Decimal("0.994") * rate).quantize(Decimal("0.01"), ROUND_HALF_UP)
    assert mig_cost == 2 * hourly  # 7 × 0.142 GPU for two hours, each hour rounded
    out = io.StringIO()
    call_command("export_usage", format="focus-csv", tenant=tenant.slug, start="2026-03-01",
                 end="2026-03-31", stdout=out)
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    mine = [r for r in rows if r["ResourceId"] == str(mig.pk)]
    plain = [r for r in rows if r["ResourceId"] == str(whole.pk)]
    assert len(mine) == 2 and len(plain) == 2
    for row in mine:
        assert row["SkuId"] == "mig-H100-1g.10gb-on_demand"
        assert row["SkuPriceId"].startswith("mig-H100-1g.10gb-on_demand-")
        assert row["ResourceType"] == "MIG Instance" and row["x_MigProfile"] == "1g.10gb"
        assert row["ConsumedUnit"] == "Instance-Hours"
        assert Decimal(row["ConsumedQuantity"]) == 7  # seven instances for one hour
        assert Decimal(row["PricingQuantity"]) == Decimal("0.994")  # GPU-hours
        assert "1g.10gb MIG instance" in row["ChargeDescription"]
    for row in plain:
        assert row["SkuId"] == "gpu-H100-on_demand" and row["ResourceType"] == "GPU Lease"
        assert row["ConsumedUnit"] == "GPU-Hours" and row["x_MigProfile"] == ""


def test_the_invoice_line_names_the_profile_and_its_instance_hours(db: Any) -> None:
    tenant, mig, _ = _billed()
    services.invoice_refresh(tenant=tenant, month=date(2026, 3, 1))
    doc = statements.statement(tenant=tenant, month=date(2026, 3, 1))
    assert doc is not None
    (line,) = [x for x in doc.lines if x["lease"] == str(mig.pk)]
    assert line["mig_profile"] == "1g.10gb" and line["instance_hours"] == Decimal("14.000")
    assert line["gpu_model"] == "H100 MIG 1g.10gb"
    assert line["gpu_hours"] == Decimal("1.988")
    _, text = statements.statement_csv(doc)
    assert "H100 MIG 1g.10gb" in text
