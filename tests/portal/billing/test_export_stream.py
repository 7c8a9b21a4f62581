"""The streamed FOCUS writers: quoting of awkward names, chunking, bounded caches."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from portal.billing import exports, focus
from portal.billing.metering import meter_leases
from tests.portal.billing.builders import make_lease
from tests.portal.factories import make_tenant

T0 = datetime(2026, 5, 1, tzinfo=UTC)
SPAN = {"start": T0, "end": T0 + timedelta(days=31)}


def _text(fmt: str, tenant: Any) -> list[str]:
    return list(exports.export(fmt, tenant=tenant, **SPAN))


def test_awkward_names_round_trip(db: Any) -> None:
    tenant = make_tenant("odd")
    tenant.name = 'Odd, "Quoted"\nTenant'
    tenant.save(update_fields=["name"])
    make_lease(tenant, active_at=T0, end_at=T0 + timedelta(hours=2), name='a,b "c"\r\nd',
               tags={"k": 'v,"w"', "ü": "é"}, priority="reserved", gpu_milli=250)
    meter_leases(until=T0 + timedelta(days=1))
    rows = list(csv.DictReader(io.StringIO("".join(_text("focus-csv", tenant)))))
    assert len(rows) == 2 and list(rows[0]) == focus.COLUMNS
    for row in rows:
        assert row["BillingAccountName"] == row["SubAccountName"] == 'Odd, "Quoted"\nTenant'
        assert row["ResourceName"] == 'a,b "c"\r\nd'
        assert json.loads(row["Tags"]) == {"k": 'v,"w"', "ü": "é"}
        assert row["CapacityReservationId"] == row["ResourceId"]
        assert row["x_GpuCount"] == "0.250" and row["PricingQuantity"] == "0.250000"
        assert row["ChargeDescription"] == "0.25 x H100 (reserved) for 3600 s"
    records = [json.loads(x, parse_float=Decimal)
               for x in "".join(_text("focus-jsonl", tenant)).splitlines()]
    assert [r["ResourceName"] for r in records] == ['a,b "c"\r\nd'] * 2
    assert records[0]["Tags"] == {"k": 'v,"w"', "ü": "é"}
    assert records[0]["x_GpuUtilizationAvg"] is None and records[0]["ChargeClass"] is None
    assert records[0]["BilledCost"] == Decimal(rows[0]["BilledCost"])


def test_chunks_are_about_64_kib_and_caches_stay_bounded(db: Any, monkeypatch: Any) -> None:
    tenant = make_tenant("many")
    for k in range(12):
        make_lease(tenant, active_at=T0 + timedelta(minutes=k), end_at=T0 + timedelta(days=2),
                   ended_at=T0 + timedelta(days=2), name=f"lease-{k}", gpu_count=1 + k % 3)
    meter_leases(until=T0 + timedelta(days=3))
    for fmt in ("focus-csv", "focus-jsonl", "csv"):
        whole = _text(fmt, tenant)
        assert len(whole) >= 2 and all(len(c) < focus.CHUNK_BYTES + 4096 for c in whole)
        assert all(len(c) >= focus.CHUNK_BYTES for c in whole[:-1])
        monkeypatch.setattr(focus, "CACHE_MAX", 5)
        monkeypatch.setattr(focus, "CHUNK", 7)
        assert "".join(_text(fmt, tenant)) == "".join(whole)  # same bytes after evictions
        monkeypatch.undo()
    lines = "".join(_text("focus-csv", tenant)).splitlines()
    assert len(lines) == 1 + 12 * 48  # header + 12 leases × 48 hours
