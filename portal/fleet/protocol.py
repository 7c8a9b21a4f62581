"""Protocol v1 as the portal reads it (docs/agent-protocol.md).

The request bodies every agent endpoint accepts are declared once below (``ENROL``,
``REPORT``, ``CREDENTIAL``, ``DESIRED_QUERY``) with the storage bounds of each field
(``portal.fleet.schema``). Within the agents' own rules (``agents/protocol.py``: the
portal must not import ``agents``) both sides report the same problems, field path and
wording included (tests/portal/fleet/test_protocol.py checks it); the portal adds upper
bounds, finite numbers and string lengths on top. The desired-state validator checks the
portal's own output against §6.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from portal.fleet import schema as S
from portal.fleet.schema import Problem

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
    "enrolment_refused": 403,
    "enrolment_denied": 403,
    "pending_approval": 409,
    "rate_limited": 429,
}
_PKEY_RE = re.compile(r"^0x[0-9a-f]{4}$")
_GUID_RE = re.compile(r"^0x[0-9a-f]{16}$")


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


def _protocol(v: _V, d: dict[str, Any]) -> None:
    version = v.req(d, "protocol", int, "")
    if version is not None and version != PROTOCOL_VERSION:
        v.add("protocol", f"unsupported version {version}; this server speaks {PROTOCOL_VERSION}")


# --- request bodies, declared once (portal.fleet.schema) ---------------------------
TS_MAX = 4_102_444_800.0  # 2100-01-01: a ``ts`` becomes a timezone-aware datetime
_HOSTNAME_RE = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                          r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
_GUID = S.Str(max_len=18, pattern=_GUID_RE, pattern_message="must be 0x + 16 lowercase hex digits")
_COUNT = S.Int(min=0, max=S.UINT64_MAX, message="must be an integer >= 0")
_TS = S.Num(min=0, max=TS_MAX)
_OBJECTS = S.Arr(S.Obj(max_keys=64), max_len=10_000)


def _version(value: Any) -> str | None:
    if value != PROTOCOL_VERSION:
        return f"unsupported version {value}; this server speaks {PROTOCOL_VERSION}"
    return None


_PROTOCOL = S.F("protocol", S.Int(min=-S.INT64_MAX, check=_version))
_HOST_INVENTORY = S.Obj((
    S.F("hostname", S.Str(max_len=253), optional=True),
    S.F("cpus", S.Int(max=S.INT32_MAX // 1000), optional=True),
    S.F("memory_total_bytes", S.Int(max=S.INT64_MAX), optional=True),
))
_GPU_INVENTORY = S.Obj((
    S.F("index", S.Int(max=S.INT16_MAX), optional=True),
    S.F("uuid", S.Str(max_len=64), optional=True),
    S.F("name", S.Str(max_len=128), optional=True),
    S.F("pci_bus_id", S.Str(max_len=32), optional=True),
    S.F("memory_total_bytes", S.Int(max=S.INT32_MAX * 2**20), optional=True),
))
_PORT_INVENTORY = S.Obj((
    S.F("device", S.Str(max_len=32), optional=True),
    S.F("port", S.Int(min=1, max=S.INT16_MAX), optional=True),
    S.F("port_guid", S.Str(max_len=18), optional=True),
    S.F("node_guid", S.Str(max_len=64), optional=True),
    S.F("link_layer", S.Str(max_len=32), optional=True),
    S.F("rate_gbps", S.Num(max=1e6), optional=True),
))
ENROL = S.Obj((
    _PROTOCOL,
    S.F("bootstrap_token", S.Str(max_len=128)),
    S.F("role", S.Str(max_len=8, choices=ROLES)),
    S.F("hostname", S.Str(max_len=253, pattern=_HOSTNAME_RE,
                          pattern_message="must be a DNS host name (RFC 1123)")),
    S.F("agent_version", S.Str(max_len=32)),
    S.F("machine_id", S.Str(max_len=64), optional=True),
    S.F("inventory", S.Obj((
        S.F("host", _HOST_INVENTORY, optional=True),
        S.F("gpus", S.Arr(_GPU_INVENTORY, max_len=256, unique="index"), optional=True),
        S.F("ib_ports", S.Arr(_PORT_INVENTORY, max_len=256), optional=True),
    )), optional=True),
))

_GPU = S.Obj((
    S.F("index", S.Int(max=S.INT16_MAX)),
    S.F("healthy", S.Bool()),
    S.F("uuid", S.Str(max_len=64), optional=True),
    *(S.F(key, S.Num(), optional=True) for key in (
        "memory_total_bytes", "memory_used_bytes", "memory_free_bytes", "gpu_util_pct",
        "mem_util_pct", "power_w", "energy_mj", "sm_clock_mhz", "mem_clock_mhz",
        "ecc_uncorrected_volatile", "remapped_rows_correctable",
        "remapped_rows_uncorrectable")),
    S.F("temperature_c", S.Num(min=-1000, max=1000), optional=True),
    S.F("last_xid", S.Int(min=-S.INT32_MAX - 1, max=S.INT32_MAX), optional=True),
    S.F("lost", S.Bool(), optional=True),
    S.F("name", S.Str(max_len=128), optional=True),
    S.F("pci_bus_id", S.Str(max_len=32), optional=True),
))
_PORT = S.Obj((
    S.F("device", S.Str(max_len=32)),
    S.F("port", S.Int(min=1, max=S.INT16_MAX)),
    S.F("port_guid", _GUID, optional=True),
    S.F("counters", S.Map(_COUNT)),
    S.F("saturated", S.Arr(S.Str(max_len=64), max_len=256)),
    S.F("state", S.Str(max_len=32), optional=True),  # both go into health alert text
    S.F("state_id", S.Int(max=S.INT16_MAX), optional=True),
    S.F("phys_state", S.Str(max_len=32), optional=True),
    S.F("phys_state_id", S.Int(max=S.INT16_MAX), optional=True),
    S.F("rates_per_s", S.Map(S.Num(min=-float(S.UINT64_MAX))), optional=True),
    S.F("xmit_bytes", S.Num(), optional=True),
    S.F("rcv_bytes", S.Num(), optional=True),
))
_XID = S.Obj((
    S.F("gpu_uuid", S.Str(max_len=64)),
    S.F("xid", S.Int(max=S.INT32_MAX)),
    S.F("ts", _TS),
))
_TELEMETRY = S.Obj((
    S.F("ts", _TS),
    S.F("host", S.Obj((S.F("hostname", S.Str(max_len=253)),))),
    S.F("gpus", S.Arr(_GPU, max_len=256), optional=True),
    S.F("ib_ports", S.Arr(_PORT, max_len=256), optional=True),
    S.F("xid_events", S.Arr(_XID, max_len=1000), optional=True),
))
# One GPU's teardown check (optional, additive in v1; agents/node/cleaning.py): clean = no
# process is left on it; what could not be reset is said, never hidden.
_CLEANING = S.Obj((
    S.F("gpu_index", S.Int(max=S.INT16_MAX)),
    S.F("clean", S.Bool()),
    S.F("lease_id", S.Str(max_len=64), optional=True),
    S.F("gpu_uuid", S.Str(max_len=64), optional=True),
    S.F("processes", S.Arr(S.Anything(), max_len=1024), optional=True),
    S.F("killed", S.Arr(S.Anything(), max_len=1024), optional=True),
    S.F("reset", S.Arr(S.Anything(), max_len=64), optional=True),
    S.F("not_reset", _OBJECTS, optional=True),
    S.F("checked_at", S.Num(min=0), optional=True),
))
_OBSERVED = S.Obj((
    S.F("generation_applied", S.Int()),
    S.F("generation_seen", S.Int(), optional=True),
    S.F("apply_errors", _OBJECTS, optional=True),
    S.F("partitions", _OBJECTS, optional=True),
    S.F("ipoib_children", _OBJECTS, optional=True),
    S.F("access_grants", _OBJECTS, optional=True),
    S.F("gpu_cleaning", S.Arr(_CLEANING, max_len=256), optional=True),
    S.F("manager", S.Str(max_len=32), optional=True),
    S.F("drift", S.Arr(S.Obj(max_keys=16), max_len=100_000), optional=True),
))
REPORT = S.Obj((
    _PROTOCOL,
    S.F("node_id", S.Str(max_len=32)),
    S.F("seq", S.Int(min=1)),
    S.F("created_at", S.Str(max_len=64)),
    S.F("agent_version", S.Str(max_len=32)),
    S.F("dropped_reports", S.Int()),
    S.F("observed", _OBSERVED),
    S.F("telemetry", S.Arr(_TELEMETRY, max_len=MAX_TELEMETRY_PER_REPORT)),
))
CREDENTIAL = S.Obj((S.F("protocol", S.Int(min=-S.INT64_MAX, check=_version), optional=True),))
DESIRED_QUERY: dict[str, tuple[S.Spec, Any]] = {
    "after_generation": (S.Int(min=-1), -1),
    "wait": (S.Num(max=MAX_LONG_POLL_S), 0.0),
}


def validate_enrol(body: Any) -> list[Problem]:
    return S.problems(ENROL, body)


def validate_report(body: Any) -> list[Problem]:
    """Problems in a report body; an empty list means valid."""
    return S.problems(REPORT, body)


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
