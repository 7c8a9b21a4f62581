"""After a restore: desired-state generations only ever rise, whatever the database forgot.

A database restored from a backup holds the generations of the backup; the agents have
applied later ones (and long-poll for anything *newer* than those). Left alone, a node
would see nothing new until the restored generation caught up — and would keep the grants
of leases that no longer exist (granted after the backup). When a report says the agent
has seen a generation above the one stored, the stored document is written again, same
content, with a generation above the agent's: the agent applies the restored desired state
at once (revoking whatever the restored database does not grant) and reports convergence.
A node (or fabric manager) whose FIRST desired state was written after the backup has no
desired row in the restored database at all: the restored database grants it nothing, so
an empty document (no partitions, no grants) is written above the agent's generation
(found by the restore drill, tests/upgrade/test_restore_drill.py: without it such a host
kept the logins of leases the restore forgot). The fabric manager's map is treated the
same way. Each resync is audited
(``fleet.desired_resync``); ``manage.py restore_check`` lists what a restore left behind.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from portal.core import clock
from portal.core.services import audit_record
from portal.fleet import protocol, wakeup
from portal.fleet.models import FabricDesiredState, NodeDesiredState
from portal.fleet.services.desired import _locked, agent_for_node
from portal.inventory.models import Node


def _seen(observed: dict[str, Any]) -> int:
    values = [observed.get("generation_applied"), observed.get("generation_seen")]
    return max((v for v in values if isinstance(v, int) and not isinstance(v, bool)),
               default=0)


@transaction.atomic
def node_resync(*, node: Node, observed: dict[str, Any]) -> int | None:
    """The node's agent has seen a generation the database does not know: rewrite its
    desired document above it (an empty one if the database has none). Returns the new
    generation, or None (nothing to do)."""
    seen = _seen(observed)
    rows = NodeDesiredState.objects.filter(node=node)
    if seen <= 0 or rows.filter(generation__gte=seen).exists():  # usual: no lock taken
        return None
    row = _locked(NodeDesiredState, node=node)
    if seen <= row.generation:
        return None
    if not row.document:  # no desired state before the backup: nothing is granted
        row.document = _empty(agent_for_node(node=node).agent_id, node=True)
    _bump(row, seen)
    wakeup.notify_desired(wakeup.node_key(node.pk))
    audit_record(actor=None, action="fleet.desired_resync", obj=node,
                 changes={"agent_seen": seen, "generation": row.generation})
    return int(row.generation)


@transaction.atomic
def fabric_resync(*, observed: dict[str, Any]) -> int | None:
    seen = _seen(observed)
    rows = FabricDesiredState.objects.filter(name="default")
    if seen <= 0 or rows.filter(generation__gte=seen).exists():  # usual: no lock taken
        return None
    row = _locked(FabricDesiredState, name="default")
    if seen <= row.generation:
        return None
    if not row.document:  # no partition map before the backup: none is wanted
        row.document = _empty("", node=False)
    _bump(row, seen)
    wakeup.notify_desired(wakeup.FABRIC_KEY)
    audit_record(actor=None, action="fleet.desired_resync", obj=row,
                 changes={"agent_seen": seen, "generation": row.generation})
    return int(row.generation)


def _empty(agent_id: str, *, node: bool) -> dict[str, Any]:
    """A complete desired document that wants nothing."""
    document: dict[str, Any] = {"protocol": protocol.PROTOCOL_VERSION, "node_id": agent_id,
                                "partitions": []}
    if node:
        document["access_grants"] = []
    return document


def _bump(row: NodeDesiredState | FabricDesiredState, seen: int) -> None:
    row.generation = seen + 1
    row.document = {**row.document, "generation": row.generation,
                    "issued_at": clock.now().isoformat()}
    row.save(update_fields=["generation", "document", "updated"])
