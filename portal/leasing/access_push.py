"""Access follows people: the one entry point that re-derives and pushes the desired state
of the nodes that carry a tenant's running leases when *who may log in* changes.

Lease transitions push their own nodes (``lifecycle.pushing``). Everything else that changes
the SSH keys a lease account must hold — a member removed, a role changed, an SSH key
added or deleted, a user deactivated, a tenant suspended or resumed — calls
``tenants.hooks.access_changed_on_commit`` from inside its service transaction
(leasing connects :func:`push_tenants` to that hook at start-up). After the commit the
nodes' complete desired state is recomputed (``desired.push_node``: the same function the
lease transitions use, so there is one derivation) and written, which wakes the agents'
long-polls; with simulated agents the simulation is queued as for a transition.

A lease extension re-pushes that lease's nodes (:func:`push_lease_on_commit`), since
its grants' ``not_after`` moves. A push that fails after the commit is logged and the node
recorded (``lifecycle.repair.FAILED``): the reconciler retries it at its next beat (5 s);
the change itself stays committed (the membership is gone either way).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db import DatabaseError, transaction

from portal.core.errors import ApplicationError
from portal.inventory.models import Node
from portal.leasing import desired
from portal.leasing.lifecycle import dispatch, repair
from portal.leasing.models import Allocation, Lease

log = logging.getLogger(__name__)


def nodes_of_tenants(tenant_ids: Iterable[Any]) -> list[Node]:
    """Nodes holding a live allocation of a granting (provisioning/active) lease of any of
    ``tenant_ids``."""
    node_ids = (Allocation.objects.filter(live=True, lease__state__in=desired.GRANTING,
                                          lease__tenant_id__in=list(tenant_ids))
                .values("node_id").distinct())
    return list(Node.objects.filter(pk__in=node_ids).order_by("hostname"))


def push_nodes(nodes: Iterable[Node]) -> list[Any]:
    """Recompute and write each node's complete desired state, one node per transaction;
    returns the pks of the nodes written (simulated agents apply them after commit)."""
    pushed: list[Any] = []
    for node in nodes:
        try:
            with transaction.atomic():
                desired.push_node(node)
        except (DatabaseError, ApplicationError):
            log.exception("access push to node %s failed; the reconciler retries it",
                          node.hostname)
            _record_failure(node)
            continue
        pushed.append(node.pk)
    if pushed and settings.GPUPOOL_SIMULATED_AGENTS:
        dispatch.simulated_agents_on_commit([str(pk) for pk in pushed])
    return pushed


def _record_failure(node: Node) -> None:
    try:
        repair.FAILED.add([node.pk])
    except Exception:  # the cache is down too: the sweep still comes round
        log.warning("could not record the failed push of %s", node.hostname)


def push_tenants(tenant_ids: Iterable[Any]) -> list[Any]:
    """Push every node of the tenants' running leases."""
    return push_nodes(nodes_of_tenants(tenant_ids))


def push_fabric(_: None = None) -> None:
    """Re-derive the partition map (the storage endpoints changed)."""
    with transaction.atomic():
        desired.push_fabric()


def push_lease_on_commit(lease: Lease) -> None:
    """Re-push the nodes of one lease after commit (its end, so ``not_after``, moved)."""
    transaction.on_commit(lambda: push_nodes(desired.lease_nodes(lease)))
