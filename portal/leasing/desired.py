"""What each node (and the fabric manager) must look like, derived from live leases."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from typing import Any

from portal.fleet import services as fleet
from portal.fleet.models import FabricDesiredState, NodeDesiredState
from portal.inventory import selectors as inventory
from portal.inventory.models import HcaPort, MigMode, Node
from portal.leasing import allocation, handover, migdevices, states
from portal.leasing.models import Allocation, Lease, MigInstance
from portal.tenants.models import Tenant
from portal.tenants.selectors import host_login_keys

# Leases whose users must have access and whose tenant partition must include the node.
GRANTING = tuple(sorted(states.GRANTING))
CONTENT_KEYS = ("partitions", "access_grants", "mig")


def _tenant_keys(tenant: Tenant) -> list[str]:
    """Who may log in is the tenants app's decision (roles, active users, suspension)."""
    return host_login_keys(tenant=tenant)


def _grants(node: Node) -> tuple[list[dict[str, Any]], set[int]]:
    # A slot another lease may still be on is not granted yet (the handover fence).
    rows = (handover.unfenced(Allocation.objects.filter(node=node, live=True,
                                                        lease__state__in=GRANTING))
            .select_related("lease__tenant", "gpu", "mig_instance")
            .order_by("lease_id", "gpu__index", "slot"))
    per_lease: dict[Any, dict[str, Any]] = {}
    tenants: set[int] = set()
    keys: dict[Any, list[str]] = {}
    for row in rows:
        lease = row.lease
        if lease.tenant_id not in keys:
            keys[lease.tenant_id] = _tenant_keys(lease.tenant)
        if lease.pk not in per_lease:
            per_lease[lease.pk] = {
                "lease_id": f"ls_{lease.pk.hex[:16]}", "account": f"lease-{lease.pk.hex[:12]}",
                "gpu_indices": [], "gpu_uuids": [], "ssh_authorized_keys": keys[lease.tenant_id],
                "expires_at": lease.end_at.isoformat(), "not_after": lease.end_at.isoformat(),
                "environment": _nccl_environment(node, lease.tenant)}
        grant = per_lease[lease.pk]
        if lease.mig_profile:
            mig = _mig_of(row)
            if mig is not None:
                grant.setdefault("mig_devices", []).append(
                    {"gpu_index": row.gpu.index, "profile": mig.profile, "start": mig.start})
        if row.gpu.index not in grant["gpu_indices"]:
            grant["gpu_indices"].append(row.gpu.index)
            grant["gpu_uuids"].append(row.gpu.uuid)
        tenants.add(lease.tenant_id)
    return list(per_lease.values()), tenants


def _mig_of(row: Allocation) -> MigInstance | None:
    """The MIG instance whose start slot ``row`` is (the reverse one-to-one), or None."""
    try:
        return row.mig_instance
    except MigInstance.DoesNotExist:
        return None


def _mig_layout(node: Node) -> list[dict[str, Any]]:
    """Per GPU of the node that MIG may use (its mode dynamic, or instances on it): the
    instances of granting leases it must hold (ADR 0222); a releasing lease's instance is
    left out, so the agent destroys it once its grant is torn down, and the teardown is
    observed only then. [] tells the agent to destroy idle ones. A GPU in a fixed layout
    (ADR 0238) holds every instance of its layout, leased or not (the agent cleans a
    torn-down grant's instance in place); one with MIG off in its layout: [] (whole). A GPU
    switched to whole that its agent still reports under MIG: [] until MIG is off there
    (the agent leaves a GPU not listed alone, ``agents.node.migapply``)."""
    instances: dict[int, list[dict[str, Any]]] = defaultdict(list)
    managed: set[int] = migdevices.still_split(node.pk)
    for index, profile, start, state in MigInstance.objects.filter(
            gpu__node=node, allocation__live=True).order_by("gpu__index", "start").values_list(
            "gpu__index", "profile", "start", "lease__state"):
        managed.add(index)
        if state in GRANTING:
            instances[index].append({"profile": profile, "start": start})
    for index, own, own_layout in node.gpus.values_list("index", "mig_mode", "mig_layout"):
        if (own or node.mig_mode) == MigMode.DYNAMIC:
            managed.add(index)
        fixed = allocation.fixed_layout(own, own_layout, node.mig_mode, node.mig_layout, index)
        if fixed is not None:
            managed.add(index)
            instances[index] = [{"profile": p, "start": s} for p, s in fixed.instances]
    return [{"gpu_index": i, "instances": instances.get(i, [])} for i in sorted(managed)]


def ensure_partition(tenant: Tenant) -> None:
    """Allocate the tenant's partition key now if it has none (see ``_try_place``)."""
    fleet.partition_for_tenant(tenant=tenant)


def _partition_entry(tenant: Tenant, port_guids: list[str]) -> dict[str, Any]:
    partition = fleet.partition_for_tenant(tenant=tenant)
    return {"name": f"tenant_{tenant.slug.replace('-', '_')}"[:64],
            "pkey": f"0x{partition.pkey:04x}", "membership": "full", "ipoib": True,
            "port_guids": port_guids}


def _lock_row(model: Any, **key: Any) -> None:
    """Serialise concurrent pushes for one target: lock its row BEFORE reading what to
    write, so a slower push can never overwrite a newer state with a stale one."""
    model.objects.get_or_create(**key)
    model.objects.select_for_update().get(**key)


def derive_node(node: Node) -> dict[str, list[dict[str, Any]]]:
    """The node's complete desired content (partitions, access grants) as of now."""
    grants, tenant_ids = _grants(node)
    ports = list(HcaPort.objects.filter(node=node).order_by("port_guid")
                 .values_list("port_guid", flat=True))
    partitions = [_partition_entry(t, ports)
                  for t in Tenant.objects.filter(pk__in=tenant_ids).order_by("slug")]
    return {"partitions": partitions, "access_grants": grants, "mig": _mig_layout(node)}


def content_hash(content: dict[str, Any]) -> str:
    """A digest of desired content, independent of key order (stored vs derived)."""
    text = json.dumps({k: content.get(k) or [] for k in CONTENT_KEYS}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def node_drifted(node: Node, stored: dict[str, Any]) -> bool:
    """Does the node's stored desired document differ from what would be derived now?"""
    return content_hash(stored) != content_hash(derive_node(node))


def push_node(node: Node) -> int:
    """Write the node's complete desired state; returns the generation to wait for."""
    _lock_row(NodeDesiredState, node=node)
    content = derive_node(node)
    return fleet.node_desired_set(node=node, partitions=content["partitions"],
                                  access_grants=content["access_grants"], mig=content["mig"])


def port_rows(node: Node | None = None) -> list[tuple[Any, str, int | None, Any]]:
    """(tenant id, port GUID, fabric id, lease order) for every HCA port of a node with a
    granting lease (of ``node`` only, if given); lease order = (start, created, id), the
    order in which index 0 of a shared port is given out."""
    qs = handover.unfenced(Allocation.objects.filter(live=True, lease__state__in=GRANTING))
    if node is not None:
        qs = qs.filter(node=node)
    return [(t, g, f, (start, created, lease)) for t, g, f, start, created, lease in qs.values_list(
        "lease__tenant_id", "node__hca_ports__port_guid", "node__hca_ports__fabric_id",
        "lease__start_at", "lease__created", "lease_id").distinct() if g]


def _nccl_environment(node: Node, tenant: Tenant) -> dict[str, str]:
    """The lease account's NCCL/UCX variables on this node (portal/fleet/nccl.py)."""
    from portal.fleet.nccl import nccl_details
    from portal.leasing.selectors import hca_port_facts

    pkey = fleet.partition_for_tenant(tenant=tenant).pkey
    ports = hca_port_facts(node_ids=[node.pk]).get(node.hostname, [])
    env: dict[str, str] = nccl_details(ports, pkey=pkey, tenant_id=tenant.pk)["environment"]
    return env


def push_fabric() -> int:
    """The partition map: each tenant with granting leases ↔ the HCA ports of their nodes
    (full; index 0 where the tenant holds the port's earliest lease) plus the storage ports
    of those nodes' fabrics (limited)."""
    _lock_row(FabricDesiredState, name="default")
    members: dict[int, set[str]] = defaultdict(set)
    fabrics: dict[int, set[int | None]] = defaultdict(set)
    rows = port_rows()
    for tenant_id, guid, fabric_id, _ in rows:
        members[tenant_id].add(guid)
        fabrics[tenant_id].add(fabric_id)
    owners = fleet.index0_owners([(t, g, at) for t, g, _, at in rows])
    partitions = []
    for tenant in Tenant.objects.filter(pk__in=members).order_by("slug"):
        partitions.append(fleet.partition_map_entry(
            tenant=tenant, name=_partition_entry(tenant, [])["name"], full=members[tenant.pk],
            index0={g for g in members[tenant.pk] if owners.get(g) == tenant.pk},
            storage=inventory.storage_guids(fabric_ids=fabrics[tenant.pk])))
    return fleet.fabric_desired_set(partitions=partitions)


def lease_nodes(lease: Lease) -> list[Node]:
    ids = Allocation.objects.filter(lease=lease).values("node_id").distinct()
    return list(Node.objects.filter(pk__in=ids).order_by("hostname"))
