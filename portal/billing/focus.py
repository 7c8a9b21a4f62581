"""FinOps FOCUS v1.2 rows for usage and credit lines (docs/billing.md, ADR 0005).

Streaming, constant memory, and cheap per row (``tests/bench/export_focus.py``):

- usage lines are read with ``.values_list(...).iterator(chunk_size=CHUNK)`` (plain tuples,
  no joins); the lease and tenant strings (ids, names, tags as JSON) are fetched once per
  batch of rows for the leases not seen yet and kept, already encoded, in bounded caches;
- every cell is produced as a ready string by the *encoding* (CSV cell text, or a JSON
  literal for JSON Lines), and strings that repeat (hour timestamps, month bounds, SKU and
  quantity columns of a lease shape) are computed once and looked up afterwards;
- the writers in ``portal/billing/exports.py`` put rows into one reusable buffer and yield
  it in chunks of about ``CHUNK_BYTES``.

A row is a tuple of strings in ``COLUMNS`` order.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from decimal import Decimal
from itertools import islice
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db.models import CharField, QuerySet
from django.db.models.functions import Cast

from portal.billing import selectors
from portal.core import csvsafe
from portal.leasing.models import Lease
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
CUSTOM = ["x_GpuModel", "x_GpuCount", "x_Priority", "x_GpuUtilizationAvg", "x_MigProfile"]
COLUMNS = MANDATORY + CONDITIONAL + CUSTOM
DECIMAL_COLUMNS = {"BilledCost", "ContractedCost", "EffectiveCost", "ListCost",
                   "PricingQuantity", "ListUnitPrice", "ContractedUnitPrice",
                   "ConsumedQuantity", "x_GpuCount", "x_GpuUtilizationAvg"}
PRICING_CATEGORY = {"on_demand": "Standard", "spot": "Dynamic", "reserved": "Committed"}
USAGE_FIELDS = ("start_text", "end_text", "seconds", "gpus", "gpu_model", "priority",
                "currency", "list_unit_price", "unit_price", "list_cost", "cost",
                "gpu_util_avg", "failed_gpu_seconds", "tenant_text", "lease_text")
CREDIT_FIELDS = ("id", "month", "source_month", "category", "kind", "amount", "currency",
                 "description", "period_start", "period_end", "tenant_id", "tenant__name",
                 "tenant__slug", "lease_id", "lease__name")
CHUNK = 2000  # rows per database round trip
CHUNK_BYTES = 64 * 1024  # bytes per yielded piece of an export
CACHE_MAX = 50_000  # entries per lookup cache (cleared when full: memory stays bounded)
GPU_HOUR = Decimal("0.000001")
SECONDS_PER_HOUR = Decimal(3600)


def zulu(at: datetime) -> str:
    return at.astimezone(selectors.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _issuer() -> str:
    return getattr(settings, "BILLING_INVOICE_ISSUER", "gpupool")


def tags_json(tags: Any) -> str:
    return json.dumps(tags or {}, sort_keys=True, separators=(",", ":"))


class Encoding:
    """How a value becomes the text of one cell, ready to join: a CSV field (defused against
    formula injection by ``portal/core/csvsafe.py``, then quoted by the ``csv`` module's own
    rules, ``json_mode=False``) or a JSON literal (``json_mode=True``, untouched). Numbers
    are written by the callers as ``f"{value:f}"`` and never pass through here."""

    def __init__(self, *, json_mode: bool) -> None:
        self.json = json_mode
        self.null = "null" if json_mode else ""
        self._buf = io.StringIO()
        self._csv = csvsafe.writer(self._buf)

    def raw(self, value: str) -> str:
        """Text that is already JSON (tags): as is in JSON, a quoted field in CSV."""
        return value if self.json else self._field(value)

    def text(self, value: str | None) -> str:
        if value is None:
            return self.null
        return json.dumps(value, ensure_ascii=False) if self.json else self._field(value)

    def _field(self, value: str) -> str:
        if not value:
            return ""
        self._buf.seek(0)
        self._buf.truncate()
        self._csv.writerow((csvsafe.defuse(value),))
        return self._buf.getvalue()[:-1]

    def value(self, value: Any) -> str:
        """Any cell value: ``None``, ``str``, ``Decimal``/``int`` (a number), ``dict``."""
        if value is None:
            return self.null
        if isinstance(value, dict):
            return self.raw(tags_json(value))
        if isinstance(value, Decimal):
            return f"{value:f}"
        if isinstance(value, bool | int):
            return str(value)
        return self.text(str(value))

    def line(self, row: tuple[str, ...]) -> str:
        """One CSV line from encoded cells (JSON Lines use ``jsonl_template``)."""
        return ",".join(row) + "\n"


class _Cache(dict):  # type: ignore[type-arg]
    """A dict that forgets everything when it grows past ``CACHE_MAX`` entries."""

    def __init__(self, make: Callable[[Any], Any]) -> None:
        super().__init__()
        self.make = make

    def __missing__(self, key: Any) -> Any:
        if len(self) >= CACHE_MAX:
            self.clear()
        value = self[key] = self.make(key)
        return value


def _batched(rows: Iterable[tuple], size: int) -> Iterator[list[tuple]]:
    it = iter(rows)
    while batch := list(islice(it, size)):
        yield batch


def usage_rows(qs: QuerySet, enc: Encoding) -> Iterator[tuple[str, ...]]:
    """FOCUS rows (tuples of encoded cells) of the usage records in ``qs``, streamed."""
    text, null = enc.text, enc.null
    issuer = text(_issuer())
    usage, gpu_hours = text("Usage"), text("GPU-Hours")
    category, service = text("AI and Machine Learning"), text("GPU Leasing")
    rtype, used, unused = text("GPU Lease"), text("Used"), text("Unused")
    mig_type, instance_hours = text("MIG Instance"), text("Instance-Hours")

    def hour(raw: str) -> tuple[str, tuple[int, int]]:
        at = datetime.fromisoformat(raw)
        at = at if at.tzinfo is not None else at.replace(tzinfo=selectors.UTC)
        utc = at.astimezone(selectors.UTC)
        return text(zulu(utc)), (utc.year, utc.month)

    def month(key: tuple[int, int]) -> tuple[str, str]:
        start, end = selectors.month_bounds(datetime(key[0], key[1], 1).date())
        return text(zulu(start)), text(zulu(end))

    def tenant(raw: str) -> tuple[str, str, str]:
        tenant_id = UUID(raw)
        row = Tenant.objects.values_list("name", "slug").get(pk=tenant_id)
        return text(str(tenant_id)), text(row[0]), text(row[1])

    def shape(key: tuple) -> tuple[str, ...]:
        gpus, seconds, model, priority, list_unit, unit, failed = key
        # what was billed: GPU-seconds on failed hardware are not (ADR 0220)
        quantity = text_num(((gpus * seconds - failed) / SECONDS_PER_HOUR).quantize(GPU_HOUR))
        sku = f"gpu-{model or 'any'}-{priority}"
        status = (used if seconds else unused) if priority == "reserved" else null
        return (text(f"{gpus.normalize():f} x {model or 'GPU'} ({priority}) for {seconds} s"),
                quantity, text(sku), text(f"{sku}-{unit}"), text_num(list_unit),
                text_num(unit), text(PRICING_CATEGORY.get(priority, "Other")), status,
                text(model), text_num(gpus), text(priority))

    def mig_shape(key: tuple) -> tuple[str, ...]:
        """A MIG lease's SKU per profile and its usage in instance-hours (ADR 0222); the
        pricing quantity stays GPU-hours (instances × their GPU equivalents)."""
        count, seconds, model, priority, unit, profile = key
        sku = f"mig-{model or 'any'}-{profile}-{priority}"
        consumed = (Decimal(count * seconds) / SECONDS_PER_HOUR).quantize(GPU_HOUR)
        return (text(f"{count} x {profile} MIG instance of {model or 'GPU'} ({priority}) "
                     f"for {seconds} s"), text(sku), text(f"{sku}-{unit}"),
                text_num(consumed), text(profile))

    def text_num(value: Decimal) -> str:
        return f"{value:f}"

    hours, months = _Cache(hour), _Cache(month)
    tenants, shapes, mig_shapes = _Cache(tenant), _Cache(shape), _Cache(mig_shape)
    currencies = _Cache(text)
    leases: dict[str, tuple[str, str, str, str, int]] = {}

    def load_leases(ids: set[str]) -> None:
        missing = ids.difference(leases)
        if not missing:
            return
        if len(leases) + len(missing) > CACHE_MAX:  # forget, keep this batch's (≤ CHUNK)
            leases.clear()
            missing = ids
        raw_of = {UUID(raw): raw for raw in missing}
        for lid, name, tags, profile, count in Lease.objects.filter(
                pk__in=list(raw_of)).values_list("id", "name", "tags", "mig_profile",
                                                 "gpu_count"):
            rid = str(lid)
            leases[raw_of[lid]] = (text(rid), text(name or f"lease {rid[:8]}"),
                                   enc.raw(tags_json(tags)), profile, count)

    # Timestamps and ids come as text (a C-level string load per cell instead of a datetime
    # parse or a UUID object); each distinct hour is turned into its Zulu form once.
    rows = (qs.annotate(start_text=Cast("period_start", CharField()),
                        end_text=Cast("period_end", CharField()),
                        tenant_text=Cast("tenant_id", CharField()),
                        lease_text=Cast("lease_id", CharField()))
            .values_list(*USAGE_FIELDS).iterator(chunk_size=CHUNK))
    for batch in _batched(rows, CHUNK):
        load_leases({r[14] for r in batch})
        for (start, end, seconds, gpus, model, priority, currency, list_unit, unit, list_cost,
             cost, util, failed, tenant_id, lease_id) in batch:
            charge_start, month_key = hours[start]
            bill_start, bill_end = months[month_key]
            account, name, slug = tenants[tenant_id]
            rid, rname, tags, profile, count = leases[lease_id]
            (desc, quantity, sku, sku_price, list_unit_s, unit_s, pricing, status, x_model,
             x_count, x_priority) = shapes[(gpus, seconds, model, priority, list_unit, unit,
                                            failed)]
            kind, consumed, consumed_unit, x_profile = rtype, quantity, gpu_hours, null
            if profile:
                desc, sku, sku_price, consumed, x_profile = mig_shapes[
                    (count, seconds, model, priority, unit, profile)]
                kind, consumed_unit = mig_type, instance_hours
            billed = f"{cost:f}"
            yield (billed, account, name, currencies[currency], bill_start, bill_end, usage,
                   null, desc, charge_start, hours[end][0], billed, billed, issuer,
                   f"{list_cost:f}", quantity, gpu_hours, issuer, issuer, category, service,
                   rid, rname, kind, sku, sku_price, list_unit_s, unit_s, consumed,
                   consumed_unit, pricing, slug, name, tags,
                   rid if priority == "reserved" else null, status, x_model, x_count,
                   x_priority, null if util is None else f"{util:f}", x_profile)


def credit_row(row: dict[str, Any]) -> dict[str, Any]:
    month_start, month_end = selectors.month_bounds(row["month"])
    issuer = _issuer()
    amount = row["amount"]
    lease = str(row["lease_id"]) if row["lease_id"] else None
    return {"BillingAccountId": str(row["tenant_id"]), "BillingAccountName": row["tenant__name"],
            "BillingCurrency": row["currency"], "BillingPeriodStart": zulu(month_start),
            "BillingPeriodEnd": zulu(month_end), "InvoiceIssuer": issuer, "Provider": issuer,
            "Publisher": issuer, "ServiceCategory": "AI and Machine Learning",
            "ServiceName": "GPU Leasing", "SubAccountId": row["tenant__slug"],
            "SubAccountName": row["tenant__name"],
            "BilledCost": amount, "ChargeCategory": row["category"],
            "ChargeClass": "Correction" if row["source_month"] != row["month"] else None,
            "ChargeDescription": row["description"],
            "ChargePeriodStart": zulu(row["period_start"]),
            "ChargePeriodEnd": zulu(row["period_end"]), "ContractedCost": amount,
            "EffectiveCost": amount, "ListCost": amount, "PricingQuantity": None,
            "PricingUnit": None, "ResourceId": lease, "ResourceName": row["lease__name"] or None,
            "ResourceType": "GPU Lease" if lease else None,
            "Tags": {"x_CreditKind": row["kind"]}}


def credit_rows(qs: QuerySet, enc: Encoding) -> Iterator[tuple[str, ...]]:
    for row in qs.values(*CREDIT_FIELDS).iterator(chunk_size=CHUNK):
        out = credit_row(row)
        yield tuple(enc.value(out.get(name)) for name in COLUMNS)


def focus_rows(*, tenant: Tenant | None, start: datetime | None, end: datetime | None,
               enc: Encoding) -> Iterator[tuple[str, ...]]:
    """Usage rows then credit rows of [start, end), streamed, as encoded cells."""
    yield from usage_rows(selectors.usage_records(tenant=tenant, start=start, end=end), enc)
    yield from credit_rows(selectors.credit_lines(tenant=tenant, start=start, end=end), enc)


def jsonl_template() -> str:
    """``'{"BilledCost":%s,…}\\n'``: one JSON Lines record from a row of JSON literals."""
    body = ",".join(f"{json.dumps(name)}:%s" for name in COLUMNS)
    return "{" + body + "}\n"
