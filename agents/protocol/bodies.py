"""The bodies every endpoint accepts, declared once with the portal's storage bounds.

``ENROL``, ``REPORT``, ``CREDENTIAL`` and ``DESIRED_QUERY`` are what the portal checks
each request against (``portal.fleet.api.views``) and what the agent checks its own
messages against before sending (``agents.node.agent``), so an agent can no longer build
a report the portal refuses. Stdlib only.
"""

from __future__ import annotations

import re
from typing import Any

from agents.protocol import schema as S
from agents.protocol.schema import Problem
from agents.protocol.wire import MAX_LONG_POLL_S, MAX_TELEMETRY_PER_REPORT, PROTOCOL_VERSION, ROLES

GUID_RE = re.compile(r"^0x[0-9a-f]{16}$")
TS_MAX = 4_102_444_800.0  # 2100-01-01: a ``ts`` becomes a timezone-aware datetime
_HOSTNAME_RE = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                          r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
_GUID = S.Str(max_len=18, pattern=GUID_RE, pattern_message="must be 0x + 16 lowercase hex digits")
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
    # optional, additive in v1 (issue 27): what a validation and the health policy read
    S.F("remapped_rows_pending", S.Bool(), optional=True),
    S.F("remapped_rows_failure", S.Bool(), optional=True),
    S.F("clocks_event_reasons", S.Int(max=S.INT64_MAX), optional=True),
    S.F("recovery_action", S.Int(max=S.INT16_MAX), optional=True),
    S.F("power_limit_w", S.Num(), optional=True),
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
# The latest validation run (optional, additive in v1; agents/node/validate.py).
_CHECK = S.Obj((
    S.F("name", S.Str(max_len=64)),
    S.F("ok", S.Bool()),
    S.F("detail", S.Str(max_len=1024), optional=True),
    S.F("gpu_index", S.Int(max=S.INT16_MAX), optional=True),
    S.F("device", S.Str(max_len=32), optional=True),
    S.F("port", S.Int(min=1, max=S.INT16_MAX), optional=True),
    S.F("skipped", S.Bool(), optional=True),
), max_keys=16)
_VALIDATION = S.Obj((
    S.F("id", S.Str(max_len=64)),
    S.F("level", S.Int(min=1, max=3)),
    S.F("passed", S.Bool()),
    S.F("running", S.Bool(), optional=True),
    S.F("checks", S.Arr(_CHECK, max_len=4096), optional=True),
    S.F("started_at", _TS, optional=True),
    S.F("finished_at", _TS, optional=True),
), max_keys=16)
_OBSERVED = S.Obj((
    S.F("generation_applied", S.Int()),
    S.F("generation_seen", S.Int(), optional=True),
    S.F("apply_errors", _OBJECTS, optional=True),
    S.F("partitions", _OBJECTS, optional=True),
    S.F("ipoib_children", _OBJECTS, optional=True),
    S.F("access_grants", _OBJECTS, optional=True),
    S.F("gpu_cleaning", S.Arr(_CLEANING, max_len=256), optional=True),
    S.F("validation", _VALIDATION, optional=True),
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
