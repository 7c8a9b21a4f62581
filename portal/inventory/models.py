"""GPU servers, their GPUs and HCA ports, and the InfiniBand fabric that joins them."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.db.models.functions import Upper


class Fabric(models.Model):
    name = models.CharField(max_length=100, unique=True)
    description = models.CharField(max_length=200, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Switch(models.Model):
    class Role(models.TextChoices):
        LEAF = "leaf", "Leaf"
        SPINE = "spine", "Spine"
        CORE = "core", "Core"

    fabric = models.ForeignKey(Fabric, on_delete=models.CASCADE, related_name="switches")
    guid = models.CharField(max_length=18, unique=True, help_text="Node GUID, 0x + 16 hex")
    description = models.CharField(max_length=200, blank=True)
    role = models.CharField(max_length=8, choices=Role.choices, default=Role.LEAF)
    ports = models.PositiveSmallIntegerField(default=0)
    lid = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["fabric", "role", "description"]
        verbose_name_plural = "switches"

    def __str__(self) -> str:
        return self.description or self.guid


class SwitchLink(models.Model):
    """A cable between two switch ports (stored once, lower GUID first)."""

    fabric = models.ForeignKey(Fabric, on_delete=models.CASCADE, related_name="links")
    a = models.ForeignKey(Switch, on_delete=models.CASCADE, related_name="+")
    a_port = models.PositiveSmallIntegerField()
    b = models.ForeignKey(Switch, on_delete=models.CASCADE, related_name="+")
    b_port = models.PositiveSmallIntegerField()
    speed = models.CharField(max_length=16, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["a", "a_port"], name="switchlink_unique_a_port"),
            models.UniqueConstraint(fields=["b", "b_port"], name="switchlink_unique_b_port"),
        ]

    def __str__(self) -> str:
        return f"{self.a}[{self.a_port}] <-> {self.b}[{self.b_port}]"


class Service(models.TextChoices):
    """Where a node or a GPU stands in its service lifecycle (``portal.fleet.lifecycle``:
    the transition table; docs/fleet.md). Only ``in_service`` hardware is offered."""

    IN_SERVICE = "in_service", "In service"
    SUSPECT = "suspect", "Suspect"  # not offered to new leases; running ones keep it
    OUT_OF_SERVICE = "out_of_service", "Out of service (repair)"  # fenced out of leases
    VALIDATING = "validating", "Validating"  # repaired: proving itself before return


class MigMode(models.TextChoices):
    """What an operator lets the scheduler do with a GPU's MIG mode (ADR 0222)."""

    WHOLE = "whole", "Whole GPUs only"
    DYNAMIC = "dynamic", "MIG instances on demand"
    FIXED = "fixed", "Fixed MIG layout (mig-parted config, ADR 0238)"


class Node(models.Model):
    class State(models.TextChoices):
        READY = "ready", "Ready"
        DRAINING = "draining", "Draining"
        DRAINED = "drained", "Drained"
        DOWN = "down", "Down"
        MAINTENANCE = "maintenance", "Maintenance"

    hostname = models.CharField(max_length=253, unique=True)
    fabric = models.ForeignKey(Fabric, on_delete=models.SET_NULL, null=True, blank=True,
                               related_name="nodes")
    leaf = models.ForeignKey(Switch, on_delete=models.SET_NULL, null=True, blank=True,
                             related_name="nodes", help_text="Leaf switch of its HCA ports")
    state = models.CharField(max_length=16, choices=State.choices, default=State.READY,
                             db_index=True)
    cpu_milli = models.PositiveIntegerField(default=0)
    memory_mib = models.PositiveBigIntegerField(default=0)
    gpu_model = models.CharField(max_length=32, blank=True, db_index=True)
    shared_tenancy = models.BooleanField(
        default=False,
        help_text="Fractions of one GPU may go to different tenants (default: a GPU is "
                  "shared only among leases of one tenant)")
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    agent_version = models.CharField(max_length=32, blank=True)
    service = models.CharField(max_length=16, choices=Service.choices,
                               default=Service.IN_SERVICE, db_default=Service.IN_SERVICE,
                               db_index=True)
    service_cause = models.CharField(max_length=300, blank=True, default="", db_default="")
    service_since = models.DateTimeField(null=True, blank=True)
    mig_mode = models.CharField(
        max_length=8, choices=MigMode.choices, default=MigMode.WHOLE, db_default=MigMode.WHOLE,
        help_text="whole: GPUs are leased whole or in time-sliced fractions; dynamic: a free "
                  "MIG-capable GPU may be split into MIG instances for orders (ADR 0222); "
                  "fixed: the layout below, never changed (ADR 0238)")
    mig_layout = models.JSONField(
        default=dict, blank=True, db_default={},
        help_text="mode fixed: the applied mig-parted config, {'config': name, 'gpus': "
                  "{index: {'mig-enabled', 'instances': [[profile, start]]}}} (ADR 0238)")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["hostname"]
        constraints = [
            models.CheckConstraint(condition=~Q(hostname=""), name="node_hostname_not_empty"),
        ]
        # Enrolment finds a host by name in any case (``hostname__iexact``: UPPER(...) =
        # UPPER(...)), twice per enrolment: without this, two scans of every node.
        indexes = [models.Index(Upper("hostname"), name="node_hostname_any_case")]

    def __str__(self) -> str:
        return self.hostname


class Gpu(models.Model):
    class Health(models.TextChoices):
        HEALTHY = "healthy", "Healthy"
        DEGRADED = "degraded", "Degraded"
        QUARANTINED = "quarantined", "Quarantined"
        LOST = "lost", "Lost"

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=64, unique=True, help_text="NVML UUID, GPU-…")
    pci_bus_id = models.CharField(max_length=32, blank=True)
    model = models.CharField(max_length=32, db_index=True)
    memory_mib = models.PositiveIntegerField(default=0)
    nvlink_domain = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="GPUs with the same number share NVLink; empty: none")
    health = models.CharField(max_length=16, choices=Health.choices, default=Health.HEALTHY)
    service = models.CharField(max_length=16, choices=Service.choices,
                               default=Service.IN_SERVICE, db_default=Service.IN_SERVICE,
                               db_index=True)
    service_cause = models.CharField(max_length=300, blank=True, default="", db_default="")
    service_since = models.DateTimeField(null=True, blank=True)
    mig_mode = models.CharField(max_length=8, choices=MigMode.choices, blank=True, default="",
                                db_default="", help_text="empty: the node's mode")
    mig_layout = models.JSONField(
        default=dict, blank=True, db_default={},
        help_text="mode fixed: this GPU's layout {'mig-enabled', 'instances'}; empty: the "
                  "node's (ADR 0238)")
    # What the node's agent last reported (``portal.leasing.migdevices.still_split``),
    # kept per GPU so a scheduling pass reads it without the nodes' observed documents:
    # a GPU still split on the hardware takes no whole-GPU lease (ADR 0244).
    mig_reported_split = models.BooleanField(
        default=False, db_default=False, editable=False,
        help_text="the agent still reports MIG on here (enabled, pending reset, or instances)")

    class Meta:
        ordering = ["node", "index"]
        constraints = [
            models.UniqueConstraint(fields=["node", "index"], name="gpu_unique_index_per_node"),
        ]
        # the pass reads the few GPUs still split (``allocation.reported_split_gpus``)
        indexes = [models.Index(fields=["node"], condition=Q(mig_reported_split=True),
                                name="gpu_mig_reported_split")]
        verbose_name = "GPU"

    def __str__(self) -> str:
        return f"{self.node.hostname}/gpu{self.index}"


class HcaPort(models.Model):
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="hca_ports", null=True,
                             blank=True)
    fabric = models.ForeignKey(Fabric, on_delete=models.CASCADE, related_name="hca_ports",
                               null=True, blank=True)
    device = models.CharField(max_length=32, blank=True, help_text="e.g. mlx5_0")
    port_number = models.PositiveSmallIntegerField(default=1)
    node_guid = models.CharField(max_length=18, blank=True)
    port_guid = models.CharField(max_length=18, unique=True)
    lid = models.PositiveIntegerField(null=True, blank=True)
    rate = models.CharField(max_length=32, blank=True)
    description = models.CharField(max_length=200, blank=True)
    switch = models.ForeignKey(Switch, on_delete=models.SET_NULL, null=True, blank=True,
                               related_name="hca_ports")
    switch_port = models.PositiveSmallIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["node", "device", "port_number"]
        verbose_name = "HCA port"

    def __str__(self) -> str:
        return f"{self.description or self.device} {self.port_guid}"


class StorageEndpoint(models.Model):
    """An HCA port of a storage server on a fabric. Every tenant partition on that fabric
    includes it as a *limited* member: tenants reach storage, never each other through it
    (see docs/adr/0107-storage-partitions.md)."""

    fabric = models.ForeignKey(Fabric, on_delete=models.CASCADE, related_name="storage")
    port_guid = models.CharField(max_length=18, help_text="Port GUID, 0x + 16 hex")
    name = models.CharField(max_length=200, blank=True,
                            help_text="Node name from the imported ibnetdiscover")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["fabric", "name", "port_guid"]
        constraints = [
            models.UniqueConstraint(fields=["port_guid"], name="storage_unique_port_guid"),
            models.CheckConstraint(condition=Q(port_guid__regex=r"^0x[0-9a-f]{16}$"),
                                   name="storage_port_guid_format"),
        ]

    def __str__(self) -> str:
        return f"{self.name or 'storage'} {self.port_guid}"
