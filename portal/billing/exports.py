"""Streamed exports: usage CSV, FOCUS CSV and FOCUS JSON Lines (constant memory)."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from portal.billing import focus, selectors
from portal.core.errors import ApplicationError
from portal.tenants.models import Tenant

FORMATS = {"csv": "text/csv", "focus-csv": "text/csv", "focus-jsonl": "application/x-ndjson"}
USAGE_COLUMNS = ["record_id", "tenant", "lease_id", "lease_name", "period_start", "period_end",
                 "used_from", "used_to", "seconds", "gpus", "gpu_hours", "gpu_model",
                 "priority", "currency", "list_unit_price", "unit_price", "list_cost", "cost",
                 "closed"]
USAGE_FIELDS = ("id", "tenant__slug", "lease_id", "lease__name", "period_start", "period_end",
                "used_from", "used_to", "seconds", "gpus", "gpu_model", "priority", "currency",
                "list_unit_price", "unit_price", "list_cost", "cost", "closed")


class _Line:
    """A file-like object whose ``write`` returns the line (Django's streaming CSV recipe)."""

    def write(self, value: str) -> str:
        return value


def _usage_values(row: dict[str, Any]) -> list[Any]:
    hours = (row["gpus"] * row["seconds"] / 3600).quantize(focus.GPU_HOUR)
    return [row["id"], row["tenant__slug"], row["lease_id"], row["lease__name"],
            focus.zulu(row["period_start"]), focus.zulu(row["period_end"]),
            focus.zulu(row["used_from"]), focus.zulu(row["used_to"]), row["seconds"],
            f"{row['gpus']:f}", f"{hours:f}", row["gpu_model"], row["priority"],
            row["currency"], f"{row['list_unit_price']:f}", f"{row['unit_price']:f}",
            f"{row['list_cost']:f}", f"{row['cost']:f}", "true" if row["closed"] else "false"]


def usage_csv(*, tenant: Tenant | None, start: datetime | None,
              end: datetime | None) -> Iterator[str]:
    writer = csv.writer(_Line(), lineterminator="\n")
    yield writer.writerow(USAGE_COLUMNS)
    rows = selectors.usage_records(tenant=tenant, start=start, end=end).values(*USAGE_FIELDS)
    for row in rows.iterator(chunk_size=focus.CHUNK):
        yield writer.writerow(_usage_values(row))


def focus_csv(*, tenant: Tenant | None, start: datetime | None,
              end: datetime | None) -> Iterator[str]:
    writer = csv.writer(_Line(), lineterminator="\n")
    yield writer.writerow(focus.COLUMNS)
    for row in focus.focus_rows(tenant=tenant, start=start, end=end):
        yield writer.writerow([focus.cell(row.get(name)) for name in focus.COLUMNS])


def focus_jsonl(*, tenant: Tenant | None, start: datetime | None,
                end: datetime | None) -> Iterator[str]:
    for row in focus.focus_rows(tenant=tenant, start=start, end=end):
        record = {name: focus.json_value(row.get(name)) for name in focus.COLUMNS}
        yield json.dumps(record, separators=(",", ":")) + "\n"


WRITERS = {"csv": usage_csv, "focus-csv": focus_csv, "focus-jsonl": focus_jsonl}


def export(fmt: str, *, tenant: Tenant | None, start: datetime | None,
           end: datetime | None) -> Iterator[str]:
    if fmt not in WRITERS:
        raise ApplicationError(f"Unknown export format {fmt!r}.",
                               fields={"format": [f"one of {', '.join(WRITERS)}"]})
    return WRITERS[fmt](tenant=tenant, start=start, end=end)


def parse_day(value: str | None, name: str) -> datetime | None:
    """``YYYY-MM-DD`` → midnight UTC (``None`` stays ``None``)."""
    if not value:
        return None
    try:
        day = datetime.strptime(value, "%Y-%m-%d")
    except ValueError as exc:
        raise ApplicationError(f"{name}: expected YYYY-MM-DD.",
                               fields={name: ["expected YYYY-MM-DD"]}) from exc
    return day.replace(tzinfo=selectors.UTC)


def filename(fmt: str, start: datetime | None, end: datetime | None) -> str:
    ext = "jsonl" if fmt == "focus-jsonl" else "csv"
    span = f"{start:%Y%m%d}-{end:%Y%m%d}" if start and end else "all"
    return f"gpupool-{fmt}-{span}.{ext}"
