"""Downsampled telemetry history: at most one ``TelemetrySample`` per GPU/port per minute
(the first sample of each minute), written with one bulk insert per report (on PostgreSQL
in the same statement as the latest rows: ``telemetry_pg``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction

from portal.core import clock
from portal.fleet.models import AgentReport, TelemetrySample
from portal.inventory.models import Node

GPU_KEEP = ("gpu_util_pct", "mem_util_pct", "memory_used_bytes", "memory_total_bytes",
            "power_w", "energy_mj", "temperature_c", "sm_clock_mhz", "healthy")
PORT_KEEP = ("state_id", "phys_state_id", "xmit_bytes", "rcv_bytes")
PORT_COUNTERS = ("link_downed", "symbol_error", "port_rcv_errors")
PORT_RATES = ("port_xmit_bytes", "port_rcv_bytes")
DEFAULT_RETENTION_DAYS = 30
DEFAULT_REPORT_RETENTION_DAYS = 7  # > the agents' spool (≈ 28 h): resends stay idempotent


def _minute(ts: float) -> datetime:
    return datetime.fromtimestamp(ts - ts % 60, UTC)


def _prev_minute(prev: dict[str, Any] | None) -> datetime | None:
    if prev is None:
        return None
    ts: datetime = prev["ts"]
    return ts.replace(second=0, microsecond=0)


SampleRow = tuple[str, str, datetime, dict[str, Any]]  # kind, key, minute, values


def gpu_sample_rows(telemetry: list[dict[str, Any]],
                    prev: dict[int, dict[str, Any]]) -> list[SampleRow]:
    """The history rows a report adds for its GPUs: the first sample of each minute after
    the minute of the GPU's latest row (``prev``)."""
    seen = {k: _prev_minute(v) for k, v in prev.items()}
    rows: list[SampleRow] = []
    for item in telemetry:
        minute = _minute(item["ts"])
        for g in item.get("gpus") or []:
            last = seen.get(g["index"])
            if last is not None and minute <= last:
                continue
            seen[g["index"]] = minute
            rows.append(("gpu", str(g["index"]), minute,
                         {k: g[k] for k in GPU_KEEP if k in g}))
    return rows


def port_sample_rows(telemetry: list[dict[str, Any]],
                     prev: dict[tuple[str, int], dict[str, Any]]) -> list[SampleRow]:
    """The same for the HCA ports (key ``device:port``)."""
    seen = {k: _prev_minute(v) for k, v in prev.items()}
    rows: list[SampleRow] = []
    for item in telemetry:
        minute = _minute(item["ts"])
        for p in item.get("ib_ports") or []:
            key = (p["device"], p["port"])
            last = seen.get(key)
            if last is not None and minute <= last:
                continue
            seen[key] = minute
            rows.append(("port", f"{key[0]}:{key[1]}"[:40], minute, _port_values(p)))
    return rows


def samples_store(node: Node, rows: list[SampleRow]) -> None:
    """Insert the rows (one bulk insert; a minute already stored is kept)."""
    if rows:
        TelemetrySample.objects.bulk_create(
            [TelemetrySample(node=node, kind=kind, key=key, minute=minute, values=values)
             for kind, key, minute, values in rows], ignore_conflicts=True)


def gpu_samples(node: Node, telemetry: list[dict[str, Any]],
                prev: dict[int, dict[str, Any]]) -> None:
    samples_store(node, gpu_sample_rows(telemetry, prev))


def port_samples(node: Node, telemetry: list[dict[str, Any]],
                 prev: dict[tuple[str, int], dict[str, Any]]) -> None:
    samples_store(node, port_sample_rows(telemetry, prev))


def _port_values(p: dict[str, Any]) -> dict[str, Any]:
    values = {k: p[k] for k in PORT_KEEP if k in p}
    counters = p.get("counters") or {}
    values.update({k: counters[k] for k in PORT_COUNTERS if k in counters})
    rates = p.get("rates_per_s") or {}
    values.update({f"{k}_per_s": rates[k] for k in PORT_RATES if k in rates})
    return values


def telemetry_purge(*, batch: int = 5000) -> dict[str, int]:
    """Delete history and idempotency keys past their retention, in short batches."""
    now = clock.now()
    days = getattr(settings, "GPUPOOL_TELEMETRY_RETENTION_DAYS", DEFAULT_RETENTION_DAYS)
    report_days = getattr(settings, "GPUPOOL_AGENT_REPORT_RETENTION_DAYS",
                          DEFAULT_REPORT_RETENTION_DAYS)
    return {
        "samples": _purge(TelemetrySample.objects.filter(
            minute__lt=now - timedelta(days=days)), batch),
        "reports": _purge(AgentReport.objects.filter(
            received__lt=now - timedelta(days=report_days)), batch),
    }


def _purge(queryset: Any, batch: int) -> int:
    total = 0
    while True:
        with transaction.atomic():
            ids = list(queryset.values_list("pk", flat=True)[:batch])
            if not ids:
                return total
            total += queryset.model.objects.filter(pk__in=ids).delete()[0]
