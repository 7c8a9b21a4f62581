"""Desired state written for a lease's nodes, and whether the nodes have reached it."""

from __future__ import annotations

from django.conf import settings

from portal.fleet import selectors as fleet_selectors
from portal.fleet.lifecycle import KEPT_BY_LEASES
from portal.inventory.models import Node
from portal.leasing import desired
from portal.leasing.lifecycle import dispatch
from portal.leasing.models import LOCK, Allocation, Lease

FABRIC = "fabric"


def lock(lease_id: object) -> Lease | None:
    """The lease row, locked (``LOCK``: the lease only, never its tenant), or None."""
    return (Lease.objects.select_for_update(**LOCK).select_related("tenant")
            .filter(pk=lease_id).first())


def push(lease: Lease, *, fabric: int | None = None) -> dict[str, int]:
    """Write the desired state of the lease's nodes and the fabric (``fabric``: the
    generation of a partition map already pushed since the lease's rows were written: not
    derived again); the generations to wait for (``provision_targets``). Simulated agents
    apply it after commit."""
    targets: dict[str, int] = {}
    for node in desired.lease_nodes(lease):
        generation = desired.push_node(node)
        if node.service in KEPT_BY_LEASES:  # a node sent to repair is not waited for
            targets[str(node.pk)] = generation
    targets[FABRIC] = desired.push_fabric() if fabric is None else fabric
    if settings.GPUPOOL_SIMULATED_AGENTS:
        dispatch.simulated_agents_on_commit([k for k in targets if k != FABRIC])
    return targets


def converged(targets: dict[str, int]) -> bool:
    """Has every node reached its target generation (the fabric is the nodes' concern)?"""
    node_ids = [k for k in targets if k != FABRIC]
    nodes = {str(n.pk): n for n in Node.objects.filter(pk__in=node_ids)}
    return all(fleet_selectors.node_converged(node=nodes[k], generation=g)
               for k, g in targets.items() if k != FABRIC and k in nodes)


def push_nodes_of(lease: Lease) -> dict[int, int]:
    """Push the lease's nodes (and the fabric); node pk → the generation written."""
    pushed = {node.pk: desired.push_node(node) for node in desired.lease_nodes(lease)}
    desired.push_fabric()
    return pushed


def fence_freed(lease: Lease, freed: list[int]) -> None:
    """Push the lease's nodes without the ``freed`` rows, each stamped with the generation
    that removed its grant: fenced until its node has applied it (``handover``)."""
    for node_id, generation in push_nodes_of(lease).items():
        Allocation.objects.filter(pk__in=freed, node_id=node_id).update(
            released_generation=generation)


def withdraw(lease: Lease) -> None:
    """Free the slots of a lease that no longer grants (it is not waiting for its own
    teardown) and push its nodes without it. A node may have applied its grant already, so
    each freed slot stays fenced (``Allocation.released_generation``, see ``handover``)
    until its node has applied this push."""
    freed = list(Allocation.objects.filter(lease=lease, live=True).values_list("pk", flat=True))
    Allocation.objects.filter(pk__in=freed).update(live=False)
    fence_freed(lease, freed)
