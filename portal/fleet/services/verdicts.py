"""A node report's signals through the health policy (``portal.fleet.policy``), and what
each verdict does: a fenced GPU or node leaves service (``faults``), a warning raises an
alert, ``info`` nothing.

Counters and flags of a GPU are read *level-triggered*: the stored previous GPU row keeps
no counters (the ingest hot path stays small), so each report is compared with a healthy
GPU — volatile uncorrected ECC 0, no remap pending or failed, no slowdown reason, recovery
action none. A GPU that keeps reporting a fault keeps producing its verdict; going out of
service again is a no-op (``lifecycle.send_to_repair``). XIDs, ``lost`` and the ports stay
edge-triggered against the previous report.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from portal.core import clock
from portal.fleet.policy import Scope, Severity, Signal, Verdict, classify, signals_from_report
from portal.fleet.policy.loader import effective_table
from portal.fleet.policy.types import Kind
from portal.fleet.services import faults

HEALTHY_GPU = {"ecc_uncorrected_volatile": 0, "remapped_rows_pending": False,
               "remapped_rows_failure": False, "clocks_event_reasons": 0,
               "recovery_action": 0}
Judged = list[tuple[Signal, Verdict]]


def judge(*, hostname: str, gpus: dict[int, dict[str, Any]],
          prev_gpus: dict[int, dict[str, Any]], ports: dict[tuple[str, int], dict[str, Any]],
          prev_ports: dict[tuple[str, int], dict[str, Any]],
          xid_events: list[dict[str, Any]]) -> Judged:
    """The report's signals with their verdicts, ``info`` left out (no database work)."""
    table = effective_table()
    before = {i: {**HEALTHY_GPU, **row} for i, row in prev_gpus.items()}
    before.update({i: dict(HEALTHY_GPU) for i in gpus if i not in before})
    signals = signals_from_report(hostname, gpus, before, ports, prev_ports, xid_events,
                                  clock.now())
    out: Judged = []
    for signal in signals:
        verdict = classify(signal, table)
        if verdict is not None and verdict.severity is not Severity.INFO:
            out.append((signal, _sure(signal, verdict, ports, prev_ports)))
    return out


def _sure(signal: Signal, verdict: Verdict, ports: dict[tuple[str, int], dict[str, Any]],
          prev_ports: dict[tuple[str, int], dict[str, Any]]) -> Verdict:
    """Symbol errors fence only when one report interval alone carries the hour's limit
    (two readings 10 s apart make one error 360/h: too eager to take a node out)."""
    if signal.kind is not Kind.IB_SYMBOL_ERRORS or signal.port is None:
        return verdict
    limit = float(effective_table().rules["ib_symbol_errors"].params.get("per_hour", 120))
    now = (ports.get(signal.port) or {}).get("counters") or {}
    then = ((prev_ports.get(signal.port) or {}).get("data") or {}).get("counters") or {}
    grew = int(now.get("symbol_error") or 0) - int(then.get("symbol_error") or 0)
    if grew >= limit:
        return verdict
    return Verdict(severity=Severity.WARNING, action=verdict.action, scope=verdict.scope,
                   fence=False, cause=verdict.cause, rule=verdict.rule)


def _at(signal: Signal) -> datetime | None:
    return datetime.fromtimestamp(signal.at, tz=UTC) if signal.at > 0 else None


def apply(*, node: Any, judged: Judged, gpu_by_index: dict[int, Any]) -> list[dict[str, Any]]:
    """Fence what the verdicts say; the alerts of the warnings (to merge into the node's)."""
    alerts: list[dict[str, Any]] = []
    for signal, verdict in judged:
        if not verdict.fence:
            alerts.append(_warning(signal, verdict))
            continue
        gpu = gpu_by_index.get(signal.gpu_index) if signal.gpu_index is not None else None
        if verdict.scope is Scope.GPU and gpu is not None:
            faults.gpu_failed(gpu=gpu, cause=verdict.cause, rule=verdict.rule, at=_at(signal))
        else:
            faults.node_failed(node=node, cause=verdict.cause, rule=verdict.rule,
                               at=_at(signal))
    return alerts


def _warning(signal: Signal, verdict: Verdict) -> dict[str, Any]:
    part = (f"gpu:{signal.gpu_index}" if signal.gpu_index is not None
            else f"port:{signal.port[0]}:{signal.port[1]}" if signal.port else "node")
    return {"key": f"{part}:{verdict.rule}", "kind": signal.kind.value, "severity": "warning",
            "message": f"{verdict.cause} → {verdict.action.value}",
            "since": clock.now().isoformat()}
