"""Reads of the fleet app."""

from __future__ import annotations

from portal.fleet.models import NodeObservedState
from portal.inventory.models import Node


def node_converged(*, node: Node, generation: int) -> bool:
    """The node applied ``generation`` (or later) without errors and its ports are in sync."""
    return NodeObservedState.objects.filter(
        node=node, generation_applied__gte=generation, partitions_in_sync=True).exists()
