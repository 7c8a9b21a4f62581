"""The desired-state document (§6) as the agent checks it before applying (stdlib only).

The portal checks its own output with the same function (``portal.fleet.services.desired``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from agents.protocol.bodies import GUID_RE
from agents.protocol.schema import MAX_PROBLEMS, Problem
from agents.protocol.wire import MEMBERSHIPS, PROTOCOL_VERSION

_PKEY_RE = re.compile(r"^0x[0-9a-f]{4}$")
# a lease account's extra environment (NCCL/UCX): names and shell-safe values only
ENV_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]{0,63}$")
ENV_VALUE_RE = re.compile(r"^[A-Za-z0-9_.,:/=+-]{0,256}$")
VALIDATION_ID_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
VALIDATION_LEVELS = (1, 2, 3)


# --- validator ----------------------------------------------------------------------
@dataclass
class _V:
    problems: list[Problem]

    def add(self, field: str, problem: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
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
        if d.get("validation") is not None:
            _validation(v, d["validation"])
        for i, gpu in enumerate(v.lst(d.get("mig", []), "mig", max_len=64)):
            _mig_gpu(v, gpu, f"mig[{i}]")
    return v.problems


def _mig_gpu(v: _V, value: Any, gp: str) -> None:
    """``{"gpu_index": 0, "instances": [{"profile": "1g.10gb", "start": 3}, …]}``: the GPU
    holds exactly these MIG instances (ADR 0222)."""
    d = v.obj(value, gp)
    if d is None:
        return
    v.req(d, "gpu_index", int, gp, minimum=0)
    for i, inst in enumerate(v.lst(d.get("instances", []), f"{gp}.instances", max_len=8)):
        ip = f"{gp}.instances[{i}]"
        e = v.obj(inst, ip)
        if e is None:
            continue
        profile = v.req(e, "profile", str, ip)
        if profile is not None and not re.match(r"^[0-9]g\.[0-9]{1,3}gb(\+[a-z]+)?$", profile):
            v.add(f"{ip}.profile", "must be a MIG profile name such as 1g.10gb")
        start = v.req(e, "start", int, ip, minimum=0)
        if isinstance(start, int) and start > 7:
            v.add(f"{ip}.start", "must be a memory slice 0..7")


def _validation(v: _V, value: Any) -> None:
    """``{"id": "vl_…", "level": 1|2|3}``: run a validation (once per new id)."""
    d = v.obj(value, "validation")
    if d is None:
        return
    vid = v.req(d, "id", str, "validation")
    if vid is not None and not VALIDATION_ID_RE.match(vid):
        v.add("validation.id", "must match ^[A-Za-z0-9_.:-]{1,64}$")
    level = v.req(d, "level", int, "validation")
    if level is not None and level not in VALIDATION_LEVELS:
        v.add("validation.level", "must be 1, 2 or 3")


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
            if guid is not None and not GUID_RE.match(guid):
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
            if not isinstance(guid, str) or not GUID_RE.match(guid):
                v.add(f"{pp}.port_guids[{i}]", "must be 0x + 16 lowercase hex digits")


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
