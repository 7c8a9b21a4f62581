"""What the portal wants each node (and the fabric) to be, and what they report back."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from portal.inventory.models import Node
from portal.tenants.models import Tenant


class NodeDesiredState(models.Model):
    """The complete desired state of one node; ``generation`` rises on every change."""

    node = models.OneToOneField(Node, on_delete=models.CASCADE, related_name="desired")
    generation = models.PositiveBigIntegerField(default=0)
    document = models.JSONField(default=dict)
    updated = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.node} desired gen {self.generation}"


class NodeObservedState(models.Model):
    """What the node's agent last reported about applying its desired state."""

    node = models.OneToOneField(Node, on_delete=models.CASCADE, related_name="observed")
    generation_applied = models.PositiveBigIntegerField(default=0)
    partitions_in_sync = models.BooleanField(default=True)
    document = models.JSONField(default=dict)
    updated = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.node} observed gen {self.generation_applied}"


class FabricDesiredState(models.Model):
    """The partition map for the fabric manager (one row per fabric)."""

    name = models.CharField(max_length=100, unique=True, default="default")
    generation = models.PositiveBigIntegerField(default=0)
    document = models.JSONField(default=dict)
    updated = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"fabric {self.name} gen {self.generation}"


class TenantPartition(models.Model):
    """A tenant's InfiniBand partition key (15 bits), never shared, quarantined on release."""

    class State(models.TextChoices):
        ACTIVE = "active", "Active"
        QUARANTINED = "quarantined", "Quarantined"

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="partitions")
    pkey = models.PositiveIntegerField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.ACTIVE)
    created = models.DateTimeField(auto_now_add=True)
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["pkey"], name="partition_unique_pkey"),
            models.UniqueConstraint(fields=["tenant"], condition=Q(state="active"),
                                    name="partition_one_active_per_tenant"),
            models.CheckConstraint(condition=Q(pkey__gte=1) & Q(pkey__lte=0x7FFE),
                                   name="partition_pkey_15_bit"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant} 0x{self.pkey:04x}"

    @property
    def pkey_hex(self) -> str:
        return f"0x{self.pkey:04x}"


class FabricObservedState(models.Model):
    """What the fabric manager last reported: generation applied and partition drift."""

    name = models.CharField(max_length=100, unique=True, default="default")
    generation_applied = models.PositiveBigIntegerField(default=0)
    manager = models.CharField(max_length=32, blank=True)
    drift = models.JSONField(default=list)
    document = models.JSONField(default=dict)
    updated = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"fabric {self.name} observed gen {self.generation_applied}"
