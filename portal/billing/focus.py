"""FinOps FOCUS v1.2 rows for usage and credit lines (docs/billing.md, ADR 0005).

Rows are built from ``.values()`` dictionaries read with ``.iterator(chunk_size=…)`` so an
export holds one chunk in memory, whatever its size.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings

from portal.billing import selectors, telemetry
from portal.tenants.models import Tenant

MANDATORY = ["BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency",
             "BillingPeriodStart", "BillingPeriodEnd", "ChargeCategory", "ChargeClass",
             "ChargeDescription", "ChargePeriodStart", "ChargePeriodEnd", "ContractedCost",
             "EffectiveCost", "InvoiceIssuer", "ListCost", "PricingQuantity", "PricingUnit",
             "Provider", "Publisher", "ServiceCategory", "ServiceName"]
CONDITIONAL = ["ResourceId", "ResourceName", "ResourceType", "SkuId", "SkuPriceId",
               "ListUnitPrice", "ContractedUnitPrice", "ConsumedQuantity", "ConsumedUnit",
               "PricingCategory", "SubAccountId", "SubAccountName", "Tags",
               "CapacityReservationId", "CapacityReservationStatus"]
CUSTOM = ["x_GpuModel", "x_GpuCount", "x_Priority", "x_GpuUtilizationAvg"]
COLUMNS = MANDATORY + CONDITIONAL + CUSTOM
DECIMAL_COLUMNS = {"BilledCost", "ContractedCost", "EffectiveCost", "ListCost",
                   "PricingQuantity", "ListUnitPrice", "ContractedUnitPrice",
                   "ConsumedQuantity", "x_GpuCount", "x_GpuUtilizationAvg"}
PRICING_CATEGORY = {"on_demand": "Standard", "spot": "Dynamic", "reserved": "Committed"}
USAGE_FIELDS = ("id", "period_start", "period_end", "seconds", "gpus", "gpu_model", "priority",
                "currency", "list_unit_price", "unit_price", "list_cost", "cost", "tenant_id",
                "tenant__name", "tenant__slug", "lease_id", "lease__name", "lease__tags")
CREDIT_FIELDS = ("id", "month", "source_month", "category", "kind", "amount", "currency",
                 "description", "period_start", "period_end", "tenant_id", "tenant__name",
                 "tenant__slug", "lease_id", "lease__name")
CHUNK = 2000
GPU_HOUR = Decimal("0.000001")


def zulu(at: datetime) -> str:
    return at.astimezone(selectors.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _issuer() -> str:
    return getattr(settings, "BILLING_INVOICE_ISSUER", "gpupool")


def _common(row: dict[str, Any], month_start: datetime) -> dict[str, Any]:
    _s, month_end = selectors.month_bounds(month_start.date())
    issuer = _issuer()
    return {"BillingAccountId": str(row["tenant_id"]), "BillingAccountName": row["tenant__name"],
            "BillingCurrency": row["currency"], "BillingPeriodStart": zulu(month_start),
            "BillingPeriodEnd": zulu(month_end), "InvoiceIssuer": issuer, "Provider": issuer,
            "Publisher": issuer, "ServiceCategory": "AI and Machine Learning",
            "ServiceName": "GPU Leasing", "SubAccountId": row["tenant__slug"],
            "SubAccountName": row["tenant__name"]}


def usage_row(row: dict[str, Any], util: dict[str, Any]) -> dict[str, Any]:
    start = row["period_start"]
    month_start, _ = selectors.month_bounds(start.date())
    gpus, seconds = row["gpus"], row["seconds"]
    quantity = (gpus * seconds / Decimal(3600)).quantize(GPU_HOUR)
    model, priority, lease = row["gpu_model"], row["priority"], str(row["lease_id"])
    reserved = priority == "reserved"
    out = _common(row, month_start)
    out.update({
        "BilledCost": row["cost"], "ChargeCategory": "Usage", "ChargeClass": None,
        "ChargeDescription": f"{gpus.normalize():f} x {model or 'GPU'} ({priority}) "
                             f"for {seconds} s",
        "ChargePeriodStart": zulu(start), "ChargePeriodEnd": zulu(row["period_end"]),
        "ContractedCost": row["cost"], "EffectiveCost": row["cost"], "ListCost": row["list_cost"],
        "PricingQuantity": quantity, "PricingUnit": "GPU-Hours",
        "ResourceId": lease, "ResourceName": row["lease__name"] or f"lease {lease[:8]}",
        "ResourceType": "GPU Lease", "SkuId": f"gpu-{model or 'any'}-{priority}",
        "SkuPriceId": f"gpu-{model or 'any'}-{priority}-{row['unit_price']}",
        "ListUnitPrice": row["list_unit_price"], "ContractedUnitPrice": row["unit_price"],
        "ConsumedQuantity": quantity, "ConsumedUnit": "GPU-Hours",
        "PricingCategory": PRICING_CATEGORY.get(priority, "Other"),
        "Tags": row["lease__tags"] or {},
        "CapacityReservationId": lease if reserved else None,
        "CapacityReservationStatus": ("Used" if seconds else "Unused") if reserved else None,
        "x_GpuModel": model, "x_GpuCount": gpus, "x_Priority": priority,
        "x_GpuUtilizationAvg": util.get(row["lease_id"]),
    })
    return out


def credit_row(row: dict[str, Any]) -> dict[str, Any]:
    month_start, _ = selectors.month_bounds(row["month"])
    out = _common(row, month_start)
    amount = row["amount"]
    lease = str(row["lease_id"]) if row["lease_id"] else None
    out.update({
        "BilledCost": amount, "ChargeCategory": row["category"],
        "ChargeClass": "Correction" if row["source_month"] != row["month"] else None,
        "ChargeDescription": row["description"], "ChargePeriodStart": zulu(row["period_start"]),
        "ChargePeriodEnd": zulu(row["period_end"]), "ContractedCost": amount,
        "EffectiveCost": amount, "ListCost": amount, "PricingQuantity": None,
        "PricingUnit": None, "ResourceId": lease, "ResourceName": row["lease__name"] or None,
        "ResourceType": "GPU Lease" if lease else None, "Tags": {"x_CreditKind": row["kind"]},
    })
    return out


def focus_rows(*, tenant: Tenant | None, start: datetime | None,
               end: datetime | None) -> Iterator[dict[str, Any]]:
    """Usage rows then credit rows of [start, end), streamed."""
    usage = selectors.usage_records(tenant=tenant, start=start, end=end).values(*USAGE_FIELDS)
    util = telemetry.lease_utilisation(tenant=tenant, start=start, end=end)
    for row in usage.iterator(chunk_size=CHUNK):
        yield usage_row(row, util)
    credits = selectors.credit_lines(tenant=tenant, start=start, end=end).values(*CREDIT_FIELDS)
    for row in credits.iterator(chunk_size=CHUNK):
        yield credit_row(row)


def cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    if isinstance(value, Decimal):
        return f"{value:f}"
    return str(value)


def json_value(value: Any) -> Any:
    """Decimals become JSON numbers with their exact digits (≤ 15 significant digits)."""
    if isinstance(value, Decimal):
        return float(value)
    return value
