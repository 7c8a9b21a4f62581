"""Streamed exports: usage CSV, FOCUS CSV and FOCUS JSON Lines (constant memory)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from portal.billing import focus, selectors
from portal.core import csvsafe
from portal.core.errors import ApplicationError
from portal.tenants.models import Tenant

FORMATS = {"csv": "text/csv", "focus-csv": "text/csv", "focus-jsonl": "application/x-ndjson"}
USAGE_COLUMNS = ["record_id", "tenant", "lease_id", "lease_name", "period_start", "period_end",
                 "used_from", "used_to", "seconds", "gpus", "gpu_hours", "gpu_model",
                 "priority", "currency", "list_unit_price", "unit_price", "list_cost", "cost",
                 "closed", "failed_gpu_seconds"]
USAGE_FIELDS = ("id", "tenant__slug", "lease_id", "lease__name", "period_start", "period_end",
                "used_from", "used_to", "seconds", "gpus", "gpu_model", "priority", "currency",
                "list_unit_price", "unit_price", "list_cost", "cost", "closed",
                "failed_gpu_seconds")


class _Buffer:
    """One reusable text buffer that rows are written into and drained in ~64 KiB pieces."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.size = 0

    def write(self, value: str) -> None:
        self.parts.append(value)
        self.size += len(value)

    def drain(self) -> str:
        out = "".join(self.parts)
        self.parts.clear()
        self.size = 0
        return out


def _usage_values(row: tuple) -> list[Any]:
    (rid, slug, lease_id, lease_name, pstart, pend, ufrom, uto, seconds, gpus, model,
     priority, currency, list_unit, unit, list_cost, cost, closed, failed) = row
    hours = ((gpus * seconds - failed) / focus.SECONDS_PER_HOUR).quantize(focus.GPU_HOUR)
    return [rid, slug, lease_id, lease_name, focus.zulu(pstart), focus.zulu(pend),
            focus.zulu(ufrom), focus.zulu(uto), seconds, f"{gpus:f}", f"{hours:f}", model,
            priority, currency, f"{list_unit:f}", f"{unit:f}", f"{list_cost:f}", f"{cost:f}",
            "true" if closed else "false", f"{failed:f}"]


def _csv_stream(header: list[str], rows: Iterator[Any]) -> Iterator[str]:
    """CSV text of ``rows``, every text cell defused (``portal/core/csvsafe.py``)."""
    buf = _Buffer()
    writer = csvsafe.writer(buf)
    writer.writerow(header)
    writerow = writer.writerow
    for row in rows:
        writerow(csvsafe.defuse_row(row))
        if buf.size >= focus.CHUNK_BYTES:
            yield buf.drain()
    yield buf.drain()


def usage_csv(*, tenant: Tenant | None, start: datetime | None,
              end: datetime | None) -> Iterator[str]:
    rows = selectors.usage_records(tenant=tenant, start=start, end=end).values_list(
        *USAGE_FIELDS)
    return _csv_stream(USAGE_COLUMNS, map(_usage_values, rows.iterator(chunk_size=focus.CHUNK)))


def focus_csv(*, tenant: Tenant | None, start: datetime | None,
              end: datetime | None) -> Iterator[str]:
    enc = focus.Encoding(json_mode=False)
    buf = _Buffer()
    write, line = buf.write, enc.line
    write(line(tuple(enc.text(name) for name in focus.COLUMNS)))
    for row in focus.focus_rows(tenant=tenant, start=start, end=end, enc=enc):
        write(line(row))
        if buf.size >= focus.CHUNK_BYTES:
            yield buf.drain()
    yield buf.drain()


def focus_jsonl(*, tenant: Tenant | None, start: datetime | None,
                end: datetime | None) -> Iterator[str]:
    enc = focus.Encoding(json_mode=True)
    template = focus.jsonl_template()
    buf = _Buffer()
    write = buf.write
    for row in focus.focus_rows(tenant=tenant, start=start, end=end, enc=enc):
        write(template % row)
        if buf.size >= focus.CHUNK_BYTES:
            yield buf.drain()
    if buf.size:
        yield buf.drain()


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
