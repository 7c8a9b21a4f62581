"""The service lifecycle's records: every transition of a node or a GPU (audited, with its
cause), and the validation runs a repaired node goes through before it returns."""

from __future__ import annotations

import secrets

from django.db import models
from django.db.models import Q

from portal.inventory.models import Gpu, Node, Service


class ServiceEvent(models.Model):
    """One transition of a node (``gpu`` empty) or of one of its GPUs."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="service_events")
    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, null=True, blank=True,
                            related_name="service_events")
    from_state = models.CharField(max_length=16, choices=Service.choices)
    to_state = models.CharField(max_length=16, choices=Service.choices)
    cause = models.CharField(max_length=300)
    rule = models.CharField(max_length=64, blank=True, help_text="health policy row, if any")
    actor = models.CharField(max_length=150, default="system")
    created = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["created", "id"]
        indexes = [models.Index(fields=["node", "created"])]

    def __str__(self) -> str:
        part = f"gpu{self.gpu.index}" if self.gpu_id and self.gpu else "node"
        return f"{self.node_id} {part} {self.from_state}->{self.to_state}"


def new_validation_id() -> str:
    return "val_" + secrets.token_hex(8)


class NodeValidation(models.Model):
    """A validation run the node's agent is asked for (desired ``validation``) and its
    result (observed ``validation``): all GPUs visible, ECC/remap clean, clocks and power
    sane, IB ports active at their rate, ``dcgmi diag`` where installed."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="validations")
    request_id = models.CharField(max_length=64, unique=True, default=new_validation_id)
    level = models.PositiveSmallIntegerField(default=2)
    requested_by = models.CharField(max_length=150, default="system")
    requested_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    passed = models.BooleanField(null=True, blank=True)
    checks = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-requested_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(level__gte=1) & Q(level__lte=3),
                                   name="validation_level_1_to_3"),
        ]

    def __str__(self) -> str:
        return f"{self.node_id} {self.request_id} {self.passed}"
