"""The enrolment inventory (§8) written into ``portal.inventory``: the node by hostname,
its GPUs by NVML index, its HCA ports by port GUID."""

from __future__ import annotations

import logging
from typing import Any

from django.db import IntegrityError, transaction

from portal.fleet.errors import AgentError
from portal.inventory.catalog import CATALOG, nvlink_domain
from portal.inventory.models import Gpu, HcaPort, Node, StorageEndpoint

log = logging.getLogger(__name__)
_BY_DISPLAY = {m.display.lower(): m.name for m in CATALOG.values()}
_BY_TOKEN = sorted(CATALOG, key=len, reverse=True)  # "A100" before "A10"


def catalog_model(nvml_name: str) -> str:
    """``NVIDIA H100 80GB HBM3`` → ``H100``; an unknown name is kept (shortened)."""
    name = (nvml_name or "").strip()
    if name.lower() in _BY_DISPLAY:
        return _BY_DISPLAY[name.lower()]
    upper = name.upper()
    if "V100" in upper:
        return "V100M32" if "32GB" in upper else "V100M16"
    words = upper.replace("-", " ").split()
    for token in _BY_TOKEN:
        if token in words or any(w.startswith(token) and not w[len(token):].isdigit()
                                 for w in words):
            return token
    return name[:32] or "unknown"


def guid_hex(text: str) -> str:
    """A sysfs node GUID (``0002:c903:000e:0b72``) as ``0x0002c903000e0b72``."""
    digits = (text or "").lower().removeprefix("0x").replace(":", "")
    return f"0x{digits}"[:18] if digits else ""


def node_for_enrolment(*, hostname: str, inventory: dict[str, Any]) -> Node:
    host = inventory.get("host") if isinstance(inventory.get("host"), dict) else {}
    node = _node(hostname.lower(), host)
    _sync_gpus(node, [g for g in inventory.get("gpus") or [] if isinstance(g, dict)])
    _sync_ports(node, [p for p in inventory.get("ib_ports") or [] if isinstance(p, dict)])
    return node


def _node(hostname: str, host: dict[str, Any]) -> Node:
    """The node named ``hostname`` (any case), locked; created if new. A concurrent
    creation of the same name (IntegrityError) is answered by the row it committed."""
    named = Node.objects.select_for_update().filter(hostname__iexact=hostname).order_by("pk")
    found = named.first()
    if found is not None:
        return found
    try:
        with transaction.atomic():
            return Node.objects.create(
                hostname=hostname, cpu_milli=int(host.get("cpus") or 0) * 1000,
                memory_mib=int(host.get("memory_total_bytes") or 0) // 2**20)
    except IntegrityError:
        found = named.first()
        if found is None:
            raise
        return found


def _sync_gpus(node: Node, gpus: list[dict[str, Any]]) -> None:
    """Each GPU by NVML index, in a fixed number of statements: one read of the node's
    GPUs, one of the UUIDs the report names, then one bulk update and one bulk insert."""
    items = [g for g in gpus if isinstance(g.get("index"), int)
             and not isinstance(g.get("index"), bool) and g["index"] >= 0]
    existing = {g.index: g for g in node.gpus.order_by()}  # no join for Meta.ordering
    owners = _uuid_owners(node, items)
    changed: dict[int, Gpu] = {}
    fields: set[str] = set()
    created: list[Gpu] = []
    for item in items:
        index, values = item["index"], _gpu_values(node, item, owners)
        gpu = existing.get(index)
        if gpu is None:
            created.append(_new_gpu(node, index, values))
            continue
        for key, value in values.items():
            if getattr(gpu, key) != value:
                setattr(gpu, key, value)
                changed[index] = gpu
                fields.add(key)
    if changed:
        Gpu.objects.bulk_update(list(changed.values()), sorted(fields))
    if created:
        Gpu.objects.bulk_create(created)
    if not node.gpu_model and items:
        node.gpu_model = catalog_model(str(items[0].get("name") or ""))
        node.save(update_fields=["gpu_model"])


def _uuid_owners(node: Node, items: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    """UUID → (node pk, index) of the GPU rows that already carry a UUID the report names."""
    uuids = {str(i.get("uuid") or "")[:64] for i in items} - {""}
    if not uuids:
        return {}
    return {uuid: (node_id, index) for uuid, node_id, index in
            Gpu.objects.filter(uuid__in=uuids).order_by().values_list("uuid", "node_id", "index")}


def _gpu_values(node: Node, item: dict[str, Any],
                owners: dict[str, tuple[int, int]]) -> dict[str, Any]:
    model = catalog_model(str(item.get("name") or node.gpu_model))
    uuid = str(item.get("uuid") or "")[:64]
    if uuid and owners.get(uuid, (node.pk, item["index"])) != (node.pk, item["index"]):
        log.warning("GPU %s already belongs to another slot; not moved", uuid)
        uuid = ""
    values: dict[str, Any] = {"model": model,
                              "pci_bus_id": str(item.get("pci_bus_id") or "")[:32]}
    if uuid:
        values["uuid"] = uuid
    if item.get("memory_total_bytes"):
        values["memory_mib"] = int(item["memory_total_bytes"]) // 2**20
    return values


def _new_gpu(node: Node, index: int, values: dict[str, Any]) -> Gpu:
    model = values["model"]
    layout = CATALOG[model].nvlink if model in CATALOG else "none"
    values = {"uuid": f"unknown-{node.hostname}-{index}"[:64],
              "memory_mib": CATALOG[model].memory_mib if model in CATALOG else 0, **values}
    return Gpu(node=node, index=index, nvlink_domain=nvlink_domain(layout, index), **values)


def _claimed_guids(node: Node, guids: list[str]) -> set[str]:
    """Port GUIDs that already belong to another node or to a storage endpoint: an
    enrolling host may not take them (it would join that node's tenant partitions)."""
    taken = set(HcaPort.objects.filter(port_guid__in=guids, node__isnull=False)
                .exclude(node=node).order_by().values_list("port_guid", flat=True))
    return taken | set(StorageEndpoint.objects.filter(port_guid__in=guids)
                       .values_list("port_guid", flat=True))


def _check_ports(node: Node, ports: list[dict[str, Any]]) -> None:
    guids = [str(p.get("port_guid") or "").lower() for p in ports]
    taken = _claimed_guids(node, guids)
    if taken:
        raise AgentError("invalid_request", "an HCA port GUID of this host already belongs "
                         "to another node; an operator must remove it there first", [
                             {"field": f"inventory.ib_ports[{i}].port_guid",
                              "problem": "belongs to another node"}
                             for i, guid in enumerate(guids) if guid in taken])


def _sync_ports(node: Node, ports: list[dict[str, Any]]) -> None:
    """Each HCA port by GUID: the check above, one read, one bulk update, one insert."""
    _check_ports(node, ports)
    wanted: dict[str, dict[str, Any]] = {}
    for item in ports:
        port_guid = str(item.get("port_guid") or "").lower()
        if len(port_guid) != 18 or not port_guid.startswith("0x"):
            continue
        rate = item.get("rate_gbps")
        wanted[port_guid] = {
            "node": node, "fabric": node.fabric, "device": str(item.get("device") or "")[:32],
            "port_number": int(item.get("port") or 1),
            "node_guid": guid_hex(str(item.get("node_guid") or "")),
            "rate": f"{rate:g} Gb/sec" if isinstance(rate, int | float) else "",
        }
    if not wanted:
        return
    existing = {p.port_guid: p for p in
                HcaPort.objects.filter(port_guid__in=list(wanted)).order_by()}
    changed: list[HcaPort] = []
    for guid, values in wanted.items():
        port = existing.get(guid)
        if port is None:
            continue
        if any(getattr(port, k) != v for k, v in values.items()):
            for key, value in values.items():
                setattr(port, key, value)
            changed.append(port)
    if changed:
        HcaPort.objects.bulk_update(changed, sorted(next(iter(wanted.values()))))
    new = [HcaPort(port_guid=g, **v) for g, v in wanted.items() if g not in existing]
    if new:
        HcaPort.objects.bulk_create(new)
