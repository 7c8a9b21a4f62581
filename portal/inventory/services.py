"""Every write to the inventory: fabric import, node import, synthetic clusters, states."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils.translation import gettext as _

from portal.core.errors import ApplicationError
from portal.core.services import audit_record
from portal.inventory import hooks
from portal.inventory import ibnetdiscover as ibn
from portal.inventory.catalog import CATALOG, NVLINK_LAYOUTS, nvlink_domain
from portal.inventory.models import (
    Fabric,
    Gpu,
    HcaPort,
    Node,
    StorageEndpoint,
    Switch,
    SwitchLink,
)
from portal.tenants.access import AnyUser

ROLE_BY_LEVEL = {1: Switch.Role.LEAF, 2: Switch.Role.SPINE}


@dataclass
class ImportReport:
    created: dict[str, int] = field(default_factory=dict)
    updated: dict[str, int] = field(default_factory=dict)
    removed: dict[str, int] = field(default_factory=dict)
    unmatched: list[str] = field(default_factory=list)

    def bump(self, kind: str, what: str, n: int = 1) -> None:
        bucket = getattr(self, kind)
        bucket[what] = bucket.get(what, 0) + n

    @property
    def changed(self) -> bool:
        return any(self.created.values()) or any(self.updated.values()) or any(
            self.removed.values())

    def as_dict(self) -> dict[str, Any]:
        return {"created": self.created, "updated": self.updated, "removed": self.removed,
                "unmatched_hcas": self.unmatched}


def _upsert(model: Any, lookup: dict[str, Any], values: dict[str, Any], report: ImportReport,
            label: str) -> Any:
    obj = model.objects.filter(**lookup).first()
    if obj is None:
        obj = model.objects.create(**lookup, **values)
        report.bump("created", label)
        return obj
    dirty = [k for k, v in values.items() if getattr(obj, k) != v]
    if dirty:
        for key in dirty:
            setattr(obj, key, values[key])
        obj.save(update_fields=dirty)
        report.bump("updated", label)
    return obj


def _import_switches(fabric: Fabric, topo: ibn.Topology,
                     report: ImportReport) -> dict[str, Switch]:
    levels = ibn.switch_levels(topo)
    switches: dict[str, Switch] = {}
    for node in topo.switches:
        role = ROLE_BY_LEVEL.get(levels[node.guid], Switch.Role.CORE)
        switches[node.guid] = _upsert(
            Switch, {"guid": node.guid},
            {"fabric": fabric, "description": node.description, "role": role,
             "ports": node.ports, "lid": node.lid}, report, "switches")
    return switches


def _import_switch_links(fabric: Fabric, topo: ibn.Topology, switches: dict[str, Switch],
                         report: ImportReport) -> None:
    wanted: dict[tuple[str, int, str, int], str] = {}
    for node in topo.switches:
        for link in node.links:
            if topo.nodes[link.remote_guid].kind != "switch":
                continue
            a, b = sorted([(node.guid, link.port), (link.remote_guid, link.remote_port)])
            wanted[(a[0], a[1], b[0], b[1])] = link.speed
    existing = {(lk.a.guid, lk.a_port, lk.b.guid, lk.b_port): lk
                for lk in SwitchLink.objects.filter(fabric=fabric).select_related("a", "b")}
    for key, link in existing.items():
        if key not in wanted:
            link.delete()
            report.bump("removed", "links")
    for key, speed in wanted.items():
        if key in existing:
            continue
        SwitchLink.objects.create(fabric=fabric, a=switches[key[0]], a_port=key[1],
                                  b=switches[key[2]], b_port=key[3], speed=speed)
        report.bump("created", "links")


def _resolve_node(desc: str, guid: str, hostname_map: dict[str, str], create: bool,
                  fabric: Fabric, report: ImportReport) -> Node | None:
    hostname = (hostname_map.get(guid) or hostname_map.get(desc)
                or ibn.hostname_from_description(desc))
    node = Node.objects.filter(hostname=hostname).first() if hostname else None
    if node is None and create and hostname:
        node = Node.objects.create(hostname=hostname, fabric=fabric)
        report.bump("created", "nodes")
    return node


def _import_hcas(fabric: Fabric, topo: ibn.Topology, switches: dict[str, Switch],
                 hostname_map: dict[str, str], create_nodes: bool,
                 report: ImportReport) -> None:
    for ca in topo.cas:
        node = _resolve_node(ca.description, ca.guid, hostname_map, create_nodes, fabric, report)
        if node is None:
            report.unmatched.append(f"{ca.guid} {ca.description!r}")
        words = ca.description.split()
        for link in ca.links:
            remote = switches.get(link.remote_guid)
            port_guid = link.port_guid or ca.guid
            _upsert(HcaPort, {"port_guid": port_guid},
                    {"fabric": fabric, "node": node, "node_guid": ca.guid,
                     "device": words[1] if len(words) > 1 else "", "port_number": link.port,
                     "lid": link.lid, "rate": link.speed, "description": ca.description,
                     "switch": remote, "switch_port": link.remote_port if remote else None},
                    report, "hca_ports")
            on_leaf = remote is not None and remote.role == Switch.Role.LEAF
            if node is not None and on_leaf and (node.leaf_id != remote.pk
                                                 or node.fabric_id != fabric.pk):
                    node.leaf, node.fabric = remote, fabric
                    node.save(update_fields=["leaf", "fabric"])
                    report.bump("updated", "node_leaf")


@transaction.atomic
def fabric_import(*, actor: AnyUser | None, fabric_name: str, text: str,
                  hostname_map: dict[str, str] | None = None,
                  create_nodes: bool = False) -> ImportReport:
    """Import ``ibnetdiscover`` output. Idempotent; all or nothing.

    Raises :class:`portal.inventory.ibnetdiscover.TopologyParseError` (with a line number)
    before anything is written if the text is malformed.
    """
    topo = ibn.parse(text)
    report = ImportReport()
    fabric, created = Fabric.objects.get_or_create(name=fabric_name)
    if created:
        report.bump("created", "fabrics")
    switches = _import_switches(fabric, topo, report)
    _import_switch_links(fabric, topo, switches, report)
    _import_hcas(fabric, topo, switches, hostname_map or {}, create_nodes, report)
    if report.changed:
        audit_record(actor=actor, action="fabric.import", obj=fabric, changes=report.as_dict())
    return report


def synthetic_gpu_uuid(hostname: str, index: int) -> str:
    """A stable placeholder UUID until the node's agent reports the real one."""
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{hostname}/gpu{index}"))


@dataclass(frozen=True)
class NodeSpec:
    hostname: str
    gpu_model: str
    gpu_count: int
    nvlink: str = "all"
    cpu_cores: int = 0
    memory_gib: int = 0
    hca_guids: tuple[str, ...] = ()


def validate_node_spec(raw: dict[str, Any], where: str) -> NodeSpec:
    """Turn one YAML/CSV row into a :class:`NodeSpec`, naming the bad field and row."""
    def fail(name: str, msg: str) -> ApplicationError:
        return ApplicationError(f"{where}: {name}: {msg}", fields={name: [msg]})

    hostname = str(raw.get("hostname") or "").strip()
    if not hostname:
        raise fail("hostname", "required")
    model = str(raw.get("gpu_model") or "").strip()
    if model not in CATALOG:
        raise fail("gpu_model", f"unknown model {model!r}; known: {sorted(CATALOG)}")
    ints: dict[str, int] = {}
    for name in ("gpu_count", "cpu_cores", "memory_gib"):
        try:
            ints[name] = int(raw.get(name) or 0)
        except (TypeError, ValueError):
            raise fail(name, "must be a whole number") from None
        if ints[name] < 0:
            raise fail(name, "must not be negative")
    if not 1 <= ints["gpu_count"] <= 16:
        raise fail("gpu_count", "must be between 1 and 16")
    nvlink = str(raw.get("nvlink") or CATALOG[model].nvlink)
    if nvlink not in NVLINK_LAYOUTS:
        raise fail("nvlink", f"one of {NVLINK_LAYOUTS}")
    guids = raw.get("hca_guids") or ()
    if isinstance(guids, str):
        guids = [g for g in guids.replace(";", " ").split() if g]
    try:
        norm = tuple(ibn.guid_hex(str(g)) for g in guids if int(str(g), 16) >= 0)
    except ValueError:
        raise fail("hca_guids", "GUIDs are hexadecimal") from None
    return NodeSpec(hostname, model, ints["gpu_count"], nvlink, ints["cpu_cores"],
                    ints["memory_gib"], norm)


@transaction.atomic
def nodes_import(*, actor: AnyUser | None, specs: Iterable[NodeSpec]) -> ImportReport:
    report = ImportReport()
    for spec in specs:
        node = _upsert(Node, {"hostname": spec.hostname},
                       {"gpu_model": spec.gpu_model, "cpu_milli": spec.cpu_cores * 1000,
                        "memory_mib": spec.memory_gib * 1024}, report, "nodes")
        have = {g.index: g for g in node.gpus.all()}
        for index in range(spec.gpu_count):
            values = {"model": spec.gpu_model, "memory_mib": CATALOG[spec.gpu_model].memory_mib,
                      "nvlink_domain": nvlink_domain(spec.nvlink, index)}
            if index not in have:
                Gpu.objects.create(node=node, index=index,
                                   uuid=synthetic_gpu_uuid(spec.hostname, index), **values)
                report.bump("created", "gpus")
        for guid in spec.hca_guids:
            _upsert(HcaPort, {"port_guid": guid}, {"node": node}, report, "hca_ports")
    if report.changed:
        audit_record(actor=actor, action="inventory.import_nodes", changes=report.as_dict())
    return report


NODE_STATES_SCHEDULABLE = (Node.State.READY,)


@transaction.atomic
def node_set_state(*, actor: AnyUser | None, node: Node, state: str, reason: str = "") -> Node:
    if state not in Node.State.values:
        raise ApplicationError(_("Unknown state."), fields={
            "state": [_("One of %(choices)s") % {"choices": Node.State.values}]})
    node = Node.objects.select_for_update().get(pk=node.pk)
    old = node.state
    if old != state:
        node.state = state
        node.save(update_fields=["state"])
        audit_record(actor=actor, action="node.set_state", obj=node,
                     changes={"state": [old, state], "reason": reason})
    return node


GUID_RE = re.compile(r"^(0x)?[0-9a-fA-F]{1,16}$")


def _storage_ports(fabric: Fabric, port_guid: str, node_name: str) -> list[HcaPort]:
    """The imported HCA ports an operator names, by port GUID or by node name."""
    if bool(port_guid) == bool(node_name):
        msg = _("Give a port GUID or a node name (one of them).")
        raise ApplicationError(msg, fields={"port_guid": [msg], "node_name": [msg]})
    ports = HcaPort.objects.filter(fabric=fabric).select_related("node")
    if port_guid:
        if not GUID_RE.match(port_guid):
            raise ApplicationError(_("Not a GUID."), fields={"port_guid": [_(
                "16 hexadecimal digits, optionally 0x-prefixed.")]})
        found = list(ports.filter(port_guid=ibn.guid_hex(port_guid)))
        field, what = "port_guid", ibn.guid_hex(port_guid)
    else:
        found = [p for p in ports.filter(description__startswith=node_name)
                 if ibn.hostname_from_description(p.description) == node_name]
        field, what = "node_name", node_name
    if not found:
        msg = _("%(what)s is not an HCA port of fabric %(fabric)s: import its ibnetdiscover "
                "output first.") % {"what": what, "fabric": fabric.name}
        raise ApplicationError(msg, fields={field: [msg]})
    gpu_ports = [p.port_guid for p in found if p.node is not None and p.node.gpus.exists()]
    if gpu_ports:
        msg = _("%(guids)s belongs to a GPU node: a storage port would reach every tenant.") % {
            "guids": ", ".join(gpu_ports)}
        raise ApplicationError(msg, fields={field: [msg]})
    return found


def _push_fabric_on_commit() -> None:
    """The partition map includes the storage ports: leasing re-derives it on commit."""
    hooks.storage_changed.emit_on_commit(None)


@transaction.atomic
def storage_endpoint_add(*, actor: AnyUser | None, fabric: Fabric, port_guid: str = "",
                         node_name: str = "") -> list[StorageEndpoint]:
    """Declare a storage server's HCA port(s) on ``fabric`` (idempotent): every tenant
    partition on it includes them as limited members from the next fabric push."""
    rows = []
    for port in _storage_ports(fabric, port_guid.strip(), node_name.strip()):
        name = ibn.hostname_from_description(port.description)
        row, created = StorageEndpoint.objects.get_or_create(
            port_guid=port.port_guid, defaults={"fabric": fabric, "name": name})
        if row.fabric_id != fabric.pk:
            msg = _("%(guid)s is already storage on fabric %(fabric)s.") % {
                "guid": port.port_guid, "fabric": row.fabric.name}
            raise ApplicationError(msg, fields={"port_guid": [msg]})
        if created:
            audit_record(actor=actor, action="fabric.storage_add", obj=row,
                         changes={"fabric": fabric.name, "port_guid": row.port_guid})
        rows.append(row)
    _push_fabric_on_commit()
    return rows


@transaction.atomic
def storage_endpoint_remove(*, actor: AnyUser | None, endpoint: StorageEndpoint) -> None:
    audit_record(actor=actor, action="fabric.storage_remove", obj=endpoint,
                 changes={"fabric": endpoint.fabric.name, "port_guid": endpoint.port_guid})
    endpoint.delete()
    _push_fabric_on_commit()
