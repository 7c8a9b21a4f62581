"""Protocol v1 as the portal reads it (docs/agent-protocol.md).

A re-implementation of the agent side's validator (``agents/protocol.py``): the portal
must not import ``agents`` (layering), and both sides must agree on every problem they
report, field path and wording included (tests/portal/fleet/test_protocol.py checks it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypedDict

PROTOCOL_VERSION = 1
MAX_LONG_POLL_S = 60
MAX_TELEMETRY_PER_REPORT = 120
ROLES = ("node", "fabric")
MEMBERSHIPS = ("full", "limited")
ERROR_CODES = {
    "invalid_json": 400,
    "invalid_report": 400,
    "invalid_request": 400,
    "unsupported_protocol": 400,
    "invalid_bootstrap_token": 401,
    "unauthenticated": 401,
    "forbidden": 403,
    "not_found": 404,
    "rate_limited": 429,
}
_PKEY_RE = re.compile(r"^0x[0-9a-f]{4}$")
_GUID_RE = re.compile(r"^0x[0-9a-f]{16}$")


class Problem(TypedDict):
    field: str
    problem: str


def error_body(code: str, message: str, details: list[Problem] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or []}}


# --- validator ----------------------------------------------------------------------
@dataclass
class _V:
    problems: list[Problem]

    def add(self, field: str, problem: str) -> None:
        if len(self.problems) < 50:
            self.problems.append({"field": field, "problem": problem})

    def obj(self, value: Any, field: str) -> dict[str, Any] | None:
        if not isinstance(value, dict):
            self.add(field, "must be an object")
            return None
        return value

    def lst(self, value: Any, field: str, max_len: int = 100_000) -> list[Any]:
        if not isinstance(value, list):
            self.add(field, "must be an array")
            return []
        if len(value) > max_len:
            self.add(field, f"at most {max_len} items")
        return value

    def req(self, d: dict[str, Any], key: str, kind: type | tuple[type, ...], path: str,
            minimum: float | None = None, optional: bool = False) -> Any:  # fmt: skip
        field = f"{path}.{key}" if path else key
        if key not in d or d[key] is None:
            if not optional:
                self.add(field, "is required")
            return None
        value = d[key]
        if isinstance(value, bool) and kind is not bool and bool not in _tuple(kind):
            self.add(field, f"must be {_kind_name(kind)}")
            return None
        if not isinstance(value, kind):
            self.add(field, f"must be {_kind_name(kind)}")
            return None
        if minimum is not None and isinstance(value, int | float) and value < minimum:
            self.add(field, f"must be >= {minimum}")
        return value


def _tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "a boolean",
             dict: "an object", list: "an array"}  # fmt: skip
    return " or ".join(names.get(k, k.__name__) for k in _tuple(kind))


NUM = (int, float)
_GPU_NUMBERS = (
    "memory_total_bytes", "memory_used_bytes", "memory_free_bytes", "gpu_util_pct",
    "mem_util_pct", "power_w", "energy_mj", "sm_clock_mhz", "mem_clock_mhz",
    "ecc_uncorrected_volatile", "remapped_rows_correctable", "remapped_rows_uncorrectable",
)  # fmt: skip


def _protocol(v: _V, d: dict[str, Any]) -> None:
    version = v.req(d, "protocol", int, "")
    if version is not None and version != PROTOCOL_VERSION:
        v.add("protocol", f"unsupported version {version}; this server speaks {PROTOCOL_VERSION}")


def validate_enrol(body: Any) -> list[Problem]:
    v = _V([])
    d = v.obj(body, "$")
    if d is None:
        return v.problems
    _protocol(v, d)
    v.req(d, "bootstrap_token", str, "")
    role = v.req(d, "role", str, "")
    if role is not None and role not in ROLES:
        v.add("role", f"must be one of {', '.join(ROLES)}")
    v.req(d, "hostname", str, "")
    v.req(d, "agent_version", str, "")
    v.req(d, "machine_id", str, "", optional=True)
    if d.get("inventory") is not None:
        v.obj(d["inventory"], "inventory")
    return v.problems


def validate_report(body: Any) -> list[Problem]:
    """Problems in a report body; an empty list means valid."""
    v = _V([])
    d = v.obj(body, "$")
    if d is None:
        return v.problems
    _protocol(v, d)
    v.req(d, "node_id", str, "")
    v.req(d, "seq", int, "", minimum=1)
    v.req(d, "created_at", str, "")
    v.req(d, "agent_version", str, "")
    v.req(d, "dropped_reports", int, "", minimum=0)
    observed = v.req(d, "observed", dict, "")
    if observed is not None:
        _observed(v, observed)
    telemetry = v.req(d, "telemetry", list, "")
    if telemetry is not None:
        v.lst(telemetry, "telemetry", MAX_TELEMETRY_PER_REPORT)
        for i, item in enumerate(telemetry[:MAX_TELEMETRY_PER_REPORT]):
            _telemetry(v, item, f"telemetry[{i}]")
    return v.problems


def _observed(v: _V, o: dict[str, Any]) -> None:
    v.req(o, "generation_applied", int, "observed", minimum=0)
    for key in ("apply_errors", "partitions", "ipoib_children", "access_grants"):
        if key in o:
            for i, item in enumerate(v.lst(o[key], f"observed.{key}")):
                v.obj(item, f"observed.{key}[{i}]")
    if "gpu_cleaning" in o:
        for i, item in enumerate(v.lst(o["gpu_cleaning"], "observed.gpu_cleaning")):
            _cleaning(v, item, f"observed.gpu_cleaning[{i}]")


def _cleaning(v: _V, item: Any, path: str) -> None:
    """One GPU's teardown check (optional, additive in v1): clean = no process left."""
    c = v.obj(item, path)
    if c is None:
        return
    v.req(c, "gpu_index", int, path, minimum=0)
    v.req(c, "clean", bool, path)
    v.req(c, "lease_id", str, path, optional=True)
    v.req(c, "gpu_uuid", str, path, optional=True)
    v.req(c, "processes", list, path, optional=True)
    v.req(c, "checked_at", NUM, path, minimum=0, optional=True)


def _telemetry(v: _V, item: Any, path: str) -> None:
    t = v.obj(item, path)
    if t is None:
        return
    v.req(t, "ts", NUM, path, minimum=0)
    host = v.req(t, "host", dict, path)
    if host is not None:
        v.req(host, "hostname", str, f"{path}.host")
    for i, gpu in enumerate(v.lst(t.get("gpus", []), f"{path}.gpus")):
        gp = f"{path}.gpus[{i}]"
        g = v.obj(gpu, gp)
        if g is None:
            continue
        v.req(g, "index", int, gp, minimum=0)
        v.req(g, "healthy", bool, gp)
        v.req(g, "uuid", str, gp, optional=True)
        for key in _GPU_NUMBERS:
            v.req(g, key, NUM, gp, minimum=0, optional=True)
        v.req(g, "temperature_c", NUM, gp, optional=True)
        v.req(g, "last_xid", int, gp, optional=True)
    for i, port in enumerate(v.lst(t.get("ib_ports", []), f"{path}.ib_ports")):
        _ib_port(v, port, f"{path}.ib_ports[{i}]")
    for i, ev in enumerate(v.lst(t.get("xid_events", []), f"{path}.xid_events")):
        e = v.obj(ev, f"{path}.xid_events[{i}]")
        if e is not None:
            v.req(e, "gpu_uuid", str, f"{path}.xid_events[{i}]")
            v.req(e, "xid", int, f"{path}.xid_events[{i}]", minimum=0)
            v.req(e, "ts", NUM, f"{path}.xid_events[{i}]", minimum=0)


def _ib_port(v: _V, port: Any, pp: str) -> None:
    p = v.obj(port, pp)
    if p is None:
        return
    v.req(p, "device", str, pp)
    v.req(p, "port", int, pp, minimum=1)
    guid = v.req(p, "port_guid", str, pp, optional=True)
    if guid is not None and not _GUID_RE.match(guid):
        v.add(f"{pp}.port_guid", "must be 0x + 16 lowercase hex digits")
    counters = v.req(p, "counters", dict, pp)
    for name, value in (counters or {}).items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            v.add(f"{pp}.counters.{name}", "must be an integer >= 0")
    v.req(p, "saturated", list, pp)


def validate_desired_state(body: Any, role: str = "node") -> list[Problem]:
    v = _V([])
    d = v.obj(body, "$")
    if d is None:
        return v.problems
    _protocol(v, d)
    v.req(d, "node_id", str, "")
    v.req(d, "generation", int, "", minimum=0)
    v.req(d, "issued_at", str, "")
    for i, part in enumerate(v.lst(d.get("partitions", []), "partitions")):
        _partition(v, part, f"partitions[{i}]", role)
    if role == "node":
        for i, grant in enumerate(v.lst(d.get("access_grants", []), "access_grants")):
            _grant(v, grant, f"access_grants[{i}]")
    return v.problems


def _partition(v: _V, part: Any, pp: str, role: str) -> None:
    p = v.obj(part, pp)
    if p is None:
        return
    pkey = v.req(p, "pkey", str, pp)
    if pkey is not None and (not _PKEY_RE.match(pkey) or int(pkey, 16) & 0x7FFF in (0, 0x7FFF)):
        v.add(f"{pp}.pkey", "must be 0x + 4 lowercase hex digits, key bits not 0 or 0x7fff")
    name = v.req(p, "name", str, pp)
    if name is not None and not re.match(r"^[A-Za-z0-9_]{1,64}$", name):
        v.add(f"{pp}.name", "must match ^[A-Za-z0-9_]{1,64}$")
    v.req(p, "ipoib", bool, pp, optional=True)
    if role == "fabric":
        for i, m in enumerate(v.lst(p.get("members"), f"{pp}.members")):
            mo = v.obj(m, f"{pp}.members[{i}]")
            if mo is None:
                continue
            guid = v.req(mo, "guid", str, f"{pp}.members[{i}]")
            if guid is not None and not _GUID_RE.match(guid):
                v.add(f"{pp}.members[{i}].guid", "must be 0x + 16 lowercase hex digits")
            ms = v.req(mo, "membership", str, f"{pp}.members[{i}]")
            if ms is not None and ms not in MEMBERSHIPS:
                v.add(f"{pp}.members[{i}].membership", "must be full or limited")
            v.req(mo, "index0", bool, f"{pp}.members[{i}]", optional=True)
    else:
        ms = v.req(p, "membership", str, pp)
        if ms is not None and ms not in MEMBERSHIPS:
            v.add(f"{pp}.membership", "must be full or limited")
        for i, guid in enumerate(v.lst(p.get("port_guids"), f"{pp}.port_guids")):
            if not isinstance(guid, str) or not _GUID_RE.match(guid):
                v.add(f"{pp}.port_guids[{i}]", "must be 0x + 16 lowercase hex digits")


# a lease account's extra environment (NCCL/UCX): names and shell-safe values only
ENV_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]{0,63}$")
ENV_VALUE_RE = re.compile(r"^[A-Za-z0-9_.,:/=+-]{0,256}$")


def _grant(v: _V, grant: Any, gp: str) -> None:
    g = v.obj(grant, gp)
    if g is None:
        return
    v.req(g, "lease_id", str, gp)
    account = v.req(g, "account", str, gp)
    if account is not None and not re.match(r"^[a-z_][a-z0-9_-]{0,31}$", account):
        v.add(f"{gp}.account", "must be a POSIX user name (a-z0-9_-, max 32)")
    for i, key in enumerate(v.lst(g.get("ssh_authorized_keys"), f"{gp}.ssh_authorized_keys")):
        if not isinstance(key, str) or "\n" in key or not key.startswith(("ssh-", "ecdsa-", "sk-")):
            v.add(f"{gp}.ssh_authorized_keys[{i}]", "must be one OpenSSH public key line")
    for i, idx in enumerate(v.lst(g.get("gpu_indices"), f"{gp}.gpu_indices")):
        if isinstance(idx, bool) or not isinstance(idx, int) or idx < 0:
            v.add(f"{gp}.gpu_indices[{i}]", "must be an integer >= 0")
    not_after = v.req(g, "not_after", str, gp, optional=True)
    if not_after is not None and not _utc_timestamp(not_after):
        v.add(f"{gp}.not_after", "must be an ISO-8601 UTC timestamp")
    env = v.req(g, "environment", dict, gp, optional=True)
    for name, value in (env or {}).items():
        if not ENV_NAME_RE.match(name) or not isinstance(value, str) \
                or not ENV_VALUE_RE.match(value):
            v.add(f"{gp}.environment.{name}", "must be NAME=value, value [A-Za-z0-9_.,:/=+-]*")


def _utc_timestamp(value: str) -> bool:
    """``2026-12-01T10:00:00+00:00`` (or ``Z``): a date, a time and a zero UTC offset."""
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return False
    return when.utcoffset() == timedelta(0)
