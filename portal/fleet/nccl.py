"""What a multi-node job inside a lease needs to use its tenant's partition (finding 11.5):
the HCAs (``NCCL_IB_HCA``, ``UCX_NET_DEVICES``), the P_Key index when the tenant's key is
not at index 0 (``NCCL_IB_PKEY``; verbs applications use index 0 unless told), and the
tenant's IPoIB interface. Pure: port facts in (one query, see
``portal.leasing.selectors.hca_port_facts``), details out; the same values go to the lease
page, the API's connection details and the lease account's environment on each node."""

from __future__ import annotations

import re
from typing import Any

DEFAULT_IPOIB_PARENT = "ib0"
# what a verbs device or an interface name looks like; anything else (a typo in an
# imported description) is left out rather than written into a shell environment
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def pkey_index(reported: Any, full_key: int, asked_index0: bool) -> int | None:
    """Index of the tenant's full key in the port's reported table (the agent reports the
    non-empty entries in index order; OpenSM and UFM fill a table from index 0); without a
    report, 0 where the fabric was asked to put the key there, else unknown."""
    if isinstance(reported, list):
        keys = []
        for text in reported:
            try:
                keys.append(int(str(text), 16))
            except ValueError:
                return None
        return keys.index(full_key) if full_key in keys else None
    return 0 if asked_index0 else None


def ipoib_interface(children: Any, full_key: int) -> str:
    """The node's IPoIB child for the key as its agent reported it, else the agent's
    naming convention on the default parent (``ib0.8101``)."""
    for child in children if isinstance(children, list) else []:
        if isinstance(child, dict) and str(child.get("pkey", "")).lower() == f"0x{full_key:04x}" \
                and _NAME.match(str(child.get("name", ""))):
            return str(child["name"])
    return f"{DEFAULT_IPOIB_PARENT}.{full_key:04x}"


def nccl_details(ports: list[dict[str, Any]], *, pkey: int, tenant_id: int) -> dict[str, Any]:
    """One node's ports (``device``, ``port_number``, ``port_guid``, ``reported`` P_Key
    table, ``ipoib_children``, ``index0_owner`` tenant id) → the ports with the key's index,
    the IPoIB interface and the NCCL/UCX environment (``NCCL_IB_PKEY`` only where every
    port has the key at the same index other than 0)."""
    full_key = pkey | 0x8000
    out = [{"hca": f"{p['device']}:{p['port_number']}", "port_guid": p["port_guid"],
            "pkey_index": pkey_index(p.get("reported"), full_key,
                                     p.get("index0_owner") == tenant_id)}
           for p in sorted(ports, key=lambda p: (p["device"], p["port_number"]))
           if _NAME.match(p["device"] or "")]
    interface = ipoib_interface(ports[0].get("ipoib_children") if ports else None, full_key)
    hcas = ",".join(p["hca"] for p in out)
    env = {"NCCL_IB_HCA": f"={hcas}", "UCX_NET_DEVICES": hcas,
           "UCX_IB_PKEY": f"0x{pkey:04x}", "GPUPOOL_IB_PKEY": f"0x{full_key:04x}",
           "GPUPOOL_IPOIB_IF": interface}
    indexes = {p["pkey_index"] for p in out}
    if len(indexes) == 1 and None not in indexes and 0 not in indexes:
        env["NCCL_IB_PKEY"] = str(indexes.pop())
    return {"ports": out, "ipoib_interface": interface, "environment": env if hcas else {}}
