"""Fleet-side node health: reachability and active alerts (Node.state is left alone)."""

from __future__ import annotations

from django.db import models

from portal.inventory.models import Node


class NodeHealth(models.Model):
    """``reachable`` turns false after a heartbeat timeout. Its GPUs stay allocated and are
    not handed to anyone else until staff confirm the node down (``Node.state``).
    ``alerts``: list of ``{"key", "kind", "severity", "message", "since"}``."""

    node = models.OneToOneField(Node, on_delete=models.CASCADE, related_name="health")
    reachable = models.BooleanField(default=True, db_index=True)
    unreachable_since = models.DateTimeField(null=True, blank=True)
    alerts = models.JSONField(default=list)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "node health"

    def __str__(self) -> str:
        return f"{self.node} {'reachable' if self.reachable else 'UNREACHABLE'}"
