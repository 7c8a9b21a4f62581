"""Compare each HCA port's P_Key table (sysfs) with the desired partitions.

The node cannot change its membership (the subnet manager does, by port GUID); it reports
what is missing or unexpected so the portal can see drift.
"""

from __future__ import annotations

from typing import Any

from agents.sysfs.infiniband import IbDevice

DEFAULT_KEYS = frozenset({0x7FFF})


def expected_pkeys(desired: dict[str, Any], port_guid: str) -> set[int]:
    """16-bit P_Keys (membership bit included) this port must hold."""
    keys: set[int] = set()
    for part in desired.get("partitions", []):
        if port_guid in part.get("port_guids", []):
            key = int(part["pkey"], 16) & 0x7FFF
            keys.add(key | 0x8000 if part.get("membership", "full") == "full" else key)
    return keys


def check_partitions(devices: list[IbDevice], desired: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for dev in devices:
        for port in dev.ports:
            if port.port_guid is None or port.link_layer not in (None, "InfiniBand"):
                continue
            present = {int(k, 16) for k in (port.pkeys or [])}
            want = expected_pkeys(desired, port.port_guid)
            missing = sorted(want - present)
            # any non-default key the desired state does not give this port
            unexpected = sorted(k for k in present - want if (k & 0x7FFF) not in DEFAULT_KEYS)
            out.append({
                "device": dev.name, "port": port.port, "port_guid": port.port_guid,
                "pkeys": port.pkeys or [],
                "missing": [f"0x{k:04x}" for k in missing],
                "unexpected": [f"0x{k:04x}" for k in unexpected],
                "in_sync": not missing and not unexpected,
            })  # fmt: skip
    return out
