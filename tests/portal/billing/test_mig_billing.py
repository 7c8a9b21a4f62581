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
from tests.portal import driving
from tests.portal.billing.builders import make_lease
from tests.portal.factories import make_tenant

T0 = datetime(2026, 3, 10, 10, 0, tzinfo=UTC)
frozen_clock = driving.frozen_clock  # the fixture (2026-11-02 09:00 UTC)


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


def _price_book(tenant: Any, per_instance: str) -> None:
    """An H100 list price, and an explicit 1g.10gb price per instance-hour (ADR 0233)."""
    from portal.billing.models import Price

    Price.objects.create(gpu_model="H100", priority="on_demand", unit_price=Decimal("3.00"),
                         effective_from=T0 - timedelta(days=1))
    Price.objects.create(gpu_model="H100", mig_profile="1g.10gb", priority="on_demand",
                         unit_price=Decimal(per_instance), effective_from=T0 - timedelta(days=1))


def test_an_explicit_profile_price_overrides_the_derived_one(db: Any) -> None:
    tenant = make_tenant("a")
    _price_book(tenant, "0.60")
    book = PriceBook(tenant)
    assert book.rate("H100", "on_demand", T0).unit_price == Decimal("3.00")  # whole GPUs
    # per GPU equivalent: 0.60 / 0.142, so that seven instances cost 7 × 0.60 an hour
    per_equivalent = book.rate("H100", "on_demand", T0, "1g.10gb").unit_price
    assert per_equivalent == Decimal("4.2254")
    # another profile of the model has no row: derived from its share of the GPU price
    assert book.rate("H100", "on_demand", T0, "3g.40gb").unit_price == Decimal("3.00")
    mig = make_lease(tenant, active_at=T0, end_at=T0 + timedelta(hours=2),
                     ended_at=T0 + timedelta(hours=2), mig_profile="1g.10gb", gpu_count=7,
                     gpu_milli=142, name="inference")
    meter_leases(until=T0 + timedelta(days=1))
    cost = sum(r.cost for r in UsageRecord.objects.filter(lease=mig))
    assert cost == Decimal("8.40")  # 7 instances × 2 h × 0.60 (not 7 × 0.142 × 3.00 × 2)
    money = statements.lease_money(mig)
    assert money is not None and money["cost"] == Decimal("8.40")


def test_the_quote_uses_the_profile_price(db: Any, frozen_clock: Any) -> None:
    from portal.inventory.generator import ClusterSpec, cluster_generate
    from portal.inventory.models import Gpu, MigMode
    from portal.leasing import quoting
    from portal.leasing.services import OrderSpec
    from portal.tenants.models import Role
    from tests.portal.factories import add_member

    cluster_generate(actor=None, spec=ClusterSpec(nodes=1, gpus_per_node=8, nodes_per_leaf=1,
                                                  spines=1, model="H100"))
    Gpu.objects.filter(index=0).update(mig_mode=MigMode.DYNAMIC)
    tenant = make_tenant("q")
    who = add_member(tenant, "q", Role.MEMBER)
    _price_book(tenant, "0.60")
    quote = quoting.order_quote(actor=who, tenant=tenant, spec=OrderSpec(
        models=["H100"], mig_profile="1g.10gb", gpu_count=2, duration_hours=Decimal(3)))
    assert quote.price == Decimal("3.60")  # 2 instances × 3 h × 0.60


def test_a_profile_price_must_name_a_profile_of_its_model(db: Any, frozen_clock: Any) -> None:
    import pytest

    from portal.core.errors import ApplicationError

    at = frozen_clock + timedelta(hours=1)
    price = services.price_create(actor=None, gpu_model="H100", mig_profile="2g.20gb",
                                  priority="on_demand", unit_price=Decimal("1.10"),
                                  effective_from=at)
    assert str(price) == "H100 2g.20gb on_demand 1.10 USD"
    for model, profile in (("H100", "banana"), ("", "1g.10gb")):
        with pytest.raises(ApplicationError) as err:
            services.price_create(actor=None, gpu_model=model, mig_profile=profile,
                                  priority="on_demand", unit_price=Decimal("1"),
                                  effective_from=at)
        assert "mig_profile" in err.value.fields
