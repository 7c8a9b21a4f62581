"""A report's delta as signals (pure). Inputs are the report shapes of
``agents/protocol/bodies.py``: GPUs by index, ports by ``(device, port)``, the report's
``xid_events``. A "before" entry may be a report dict or a stored row whose report sits
under ``"data"`` (with its ``"ts"``). Only changes give signals: a counter that grew, a
state that flipped; an unchanged state gives none, and so does a counter without a
previous reading (no baseline) or one that went backwards (reset).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from portal.fleet.policy.types import Kind, Signal

Entry = Mapping[str, Any]
THERMAL_BITS = 0x20 | 0x40  # nvmlClocksEventReasonSwThermalSlowdown | HwThermalSlowdown
POWER_BRAKE_BIT = 0x80  # nvmlClocksEventReasonHwPowerBrakeSlowdown
PORT_ACTIVE, PHYS_LINK_UP = 4, 5


def as_ts(value: Any) -> float | None:
    """Float Unix seconds from a number or an aware datetime (``None`` stays ``None``)."""
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _flat(entry: Entry | None) -> dict[str, Any]:
    if not entry:
        return {}
    data = entry.get("data")
    return {**(data if isinstance(data, Mapping) else {}),
            **{k: v for k, v in entry.items() if k != "data" and v is not None}}


def _count(entry: Mapping[str, Any], key: str) -> int | None:
    value = entry.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _grew(now: Mapping[str, Any], before: Mapping[str, Any], key: str) -> int:
    new, old = _count(now, key), _count(before, key)
    return new - old if new is not None and old is not None and new > old else 0


def _bits(entry: Mapping[str, Any], mask: int) -> int:
    return (_count(entry, "clocks_event_reasons") or 0) & mask


def _gpu_signals(node: str, index: int, now: Entry, before: Entry,
                 at: float) -> list[Signal]:
    def make(kind: Kind, value: Any) -> Signal:
        return Signal(kind=kind, node=node, value=value, at=at, gpu_index=index,
                      gpu_uuid=now.get("uuid") or None)

    out = []
    if (dbe := _grew(now, before, "ecc_uncorrected_volatile")) > 0:
        out.append(make(Kind.ECC_DBE, dbe))
    for kind, key in ((Kind.GPU_LOST, "lost"),
                      (Kind.REMAP_PENDING, "remapped_rows_pending"),
                      (Kind.REMAP_FAILURE, "remapped_rows_failure")):
        if now.get(key) is True and before.get(key) is not True:
            out.append(make(kind, True))
    for kind, mask in ((Kind.THERMAL, THERMAL_BITS), (Kind.POWER_BRAKE, POWER_BRAKE_BIT)):
        if _bits(now, mask) & ~_bits(before, mask):
            out.append(make(kind, _bits(now, mask)))
    action = _count(now, "recovery_action")
    if action is not None and action != _count(before, "recovery_action") \
            and (action != 0 or _count(before, "recovery_action") is not None):
        out.append(make(Kind.RECOVERY_ACTION, action))
    xid = _count(now, "last_xid")
    if xid is not None and xid != _count(before, "last_xid"):
        out.append(make(Kind.XID, xid))
    return out


def _link_up(port: Mapping[str, Any]) -> bool | None:
    state, phys = port.get("state_id"), port.get("phys_state_id")
    if state is None and phys is None:
        return None
    return state in (None, PORT_ACTIVE) and phys in (None, PHYS_LINK_UP)


def _symbol_rate(now: Entry, before: Entry, at: float) -> float | None:
    """Symbol errors per hour between the two readings (``None``: no increase or no
    interval to divide by)."""
    grew = _grew(now.get("counters") or {}, before.get("counters") or {}, "symbol_error")
    then = as_ts(before.get("ts"))
    if grew <= 0 or then is None or at <= then:
        return None
    return grew * 3600.0 / (at - then)


def _port_signals(node: str, key: tuple[str, int], now: Entry, before: Entry,
                  at: float) -> list[Signal]:
    def make(kind: Kind, value: Any) -> Signal:
        return Signal(kind=kind, node=node, value=value, at=at, port=key)

    out = []
    up, was_up = _link_up(now), _link_up(before)
    if up is False and was_up is not False:
        out.append(make(Kind.IB_PORT_DOWN, f"{now.get('state', now.get('state_id'))}/"
                                           f"{now.get('phys_state', now.get('phys_state_id'))}"))
    elif up is True and was_up is False:
        out.append(make(Kind.IB_PORT_UP, "ACTIVE/LinkUp"))
    if (downed := _grew(now.get("counters") or {}, before.get("counters") or {},
                        "link_downed")) > 0:
        out.append(make(Kind.IB_LINK_DOWNED, downed))
    if (rate := _symbol_rate(now, before, at)) is not None:
        out.append(make(Kind.IB_SYMBOL_ERRORS, rate))
    return out


def _xid_signals(node: str, gpus: Mapping[int, Entry],
                 xid_events: list[Entry]) -> list[Signal]:
    index_of = {g.get("uuid"): i for i, g in gpus.items() if g.get("uuid")}
    seen, out = set(), []
    for event in xid_events:
        ident = (event.get("gpu_uuid"), event.get("xid"), as_ts(event.get("ts")))
        if ident in seen or not isinstance(ident[1], int):
            continue
        seen.add(ident)
        out.append(Signal(kind=Kind.XID, node=node, value=ident[1], at=ident[2] or 0.0,
                          gpu_index=index_of.get(ident[0]), gpu_uuid=ident[0] or None))
    return out


def signals_from_report(node_key: str, gpus_now: Mapping[int, Entry],
                        gpus_before: Mapping[int, Entry],
                        ports_now: Mapping[tuple[str, int], Entry],
                        ports_before: Mapping[tuple[str, int], Entry],
                        xid_events: list[Entry], now: float | datetime) -> list[Signal]:
    """The signals of one report against the previous readings. ``now``: when the current
    readings were taken (the telemetry ``ts``; an entry's own ``"ts"`` wins). XIDs from
    ``xid_events`` come once per (GPU, XID, ts); a changed ``last_xid`` that an event of
    the same GPU already carries is not repeated."""
    at = as_ts(now) or 0.0
    out = _xid_signals(node_key, gpus_now, xid_events)
    evented = {(s.gpu_uuid, s.value) for s in out}
    for index, gpu in sorted(gpus_now.items()):
        flat = _flat(gpu)
        for signal in _gpu_signals(node_key, index, flat, _flat(gpus_before.get(index)),
                                   as_ts(flat.get("ts")) or at):
            if signal.kind is not Kind.XID or (signal.gpu_uuid, signal.value) not in evented:
                out.append(signal)
    for key, port in sorted(ports_now.items()):
        flat = _flat(port)
        out += _port_signals(node_key, key, flat, _flat(ports_before.get(key)),
                             as_ts(flat.get("ts")) or at)
    return out


def agent_silent(node_key: str, last_report_at: float | datetime | None,
                 now: float | datetime) -> Signal:
    """The signal for a node whose agent has not reported (value: seconds of silence,
    ``None`` when it never reported)."""
    at, last = as_ts(now) or 0.0, as_ts(last_report_at)
    return Signal(kind=Kind.AGENT_SILENT, node=node_key, at=at,
                  value=None if last is None else round(at - last, 3))
