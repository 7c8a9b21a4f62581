"""Orders become leases: one row, one state machine (see states.py and docs/leasing.md)."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from portal.inventory.models import Gpu, Node
from portal.tenants.models import Tenant

SLOTS_PER_GPU = 8  # fractional GPUs are leased in eighths (125 milli)
MILLI_PER_SLOT = 1000 // SLOTS_PER_GPU


class Quota(models.Model):
    """A tenant's limits for one GPU model ('' = the tenant-wide row for every model)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="quotas")
    gpu_model = models.CharField(max_length=32, blank=True, default="")
    guaranteed_gpus = models.PositiveIntegerField(default=0)
    max_gpus = models.PositiveIntegerField(default=0, help_text="max concurrent GPUs")
    gpu_hour_budget = models.DecimalField(max_digits=12, decimal_places=2, null=True,
                                          blank=True, help_text="per calendar month")
    max_lease_hours = models.PositiveIntegerField(default=24 * 30)
    max_pending_orders = models.PositiveIntegerField(default=20)
    allow_spot = models.BooleanField(default=True)
    allow_borrowing = models.BooleanField(default=True)

    class Meta:
        ordering = ["tenant", "gpu_model"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "gpu_model"], name="quota_unique_model"),
            models.CheckConstraint(condition=Q(guaranteed_gpus__lte=F("max_gpus")),
                                   name="quota_guarantee_within_max"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant} {self.gpu_model or 'all models'} ≤{self.max_gpus}"


class Priority(models.TextChoices):
    RESERVED = "reserved", "Reserved"
    ON_DEMAND = "on_demand", "On demand"
    SPOT = "spot", "Spot (preemptible)"


class Locality(models.TextChoices):
    ANY = "any", "Anywhere"
    NVLINK = "nvlink", "One NVLink domain"
    NODE = "node", "One node"
    LEAF = "leaf", "One leaf switch"
    SPINE = "spine", "Fewest spine hops"


class LeaseState(models.TextChoices):
    REQUESTED = "requested", "Requested"
    QUEUED = "queued", "Queued"
    SCHEDULED = "scheduled", "Scheduled"
    PROVISIONING = "provisioning", "Provisioning"
    ACTIVE = "active", "Active"
    NOTICE = "notice", "Preemption notice"
    RELEASING = "releasing", "Releasing"
    ENDED = "ended", "Ended"
    REJECTED = "rejected", "Rejected"
    CANCELLED = "cancelled", "Cancelled"
    FAILED = "failed", "Failed"
    PREEMPTED = "preempted", "Preempted"
    EXPIRED = "expired", "Expired"


class Condition(models.TextChoices):
    """A running lease's hardware condition (a sub-state of ACTIVE/NOTICE; '' = whole)."""

    HEALTHY = "", "Healthy"
    HEALING = "healing", "Healing"
    DEGRADED = "degraded", "Degraded"


# How a lease row is locked (``select_for_update(**LOCK)``): the lease row only, never the
# rows joined by ``select_related`` (the tenant would be locked FOR UPDATE as well, which
# serialised a tenant's every step and deadlocked against inserts referencing the tenant:
# regression test_lease_lock_leaves_the_tenant_row_alone), and FOR NO KEY UPDATE, which
# still excludes every other locker but lets rows that reference the lease be inserted.
LOCK: dict[str, Any] = {"no_key": True, "of": ("self",)}
LOCK_SKIP: dict[str, Any] = {**LOCK, "skip_locked": True}


class Lease(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="leases")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL,
                                   null=True, blank=True, related_name="+")
    name = models.CharField(max_length=100, blank=True)
    tags = models.JSONField(default=dict, blank=True)
    allowed_models = models.JSONField(default=list, help_text="acceptable GPU models")
    gpu_model = models.CharField(max_length=32, blank=True, help_text="model placed on")
    gpu_count = models.PositiveIntegerField(default=1, help_text="GPUs per node")
    gpu_milli = models.PositiveIntegerField(default=1000, help_text="<1000: a share of one GPU")
    mig_profile = models.CharField(
        max_length=32, blank=True, default="", db_default="",
        help_text="a MIG profile (1g.10gb …): gpu_count counts instances, gpu_milli is one "
                  "instance's GPU equivalents (ADR 0222)")
    nodes = models.PositiveIntegerField(default=1, help_text="gang size (nodes)")
    locality = models.CharField(max_length=8, choices=Locality.choices, default=Locality.ANY)
    locality_required = models.BooleanField(default=False)
    priority = models.CharField(max_length=16, choices=Priority.choices,
                                default=Priority.ON_DEMAND)
    start_at = models.DateTimeField(help_text="requested start (UTC)")
    end_at = models.DateTimeField(help_text="end (UTC), moved by extensions")
    state = models.CharField(max_length=16, choices=LeaseState.choices,
                             default=LeaseState.REQUESTED, db_index=True)
    state_reason = models.CharField(max_length=300, blank=True)
    wait_reason = models.CharField(max_length=32, blank=True)
    earliest_start = models.DateTimeField(null=True, blank=True)
    borrowed = models.BooleanField(default=False)
    active_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    provision_deadline = models.DateTimeField(null=True, blank=True)
    provision_attempts = models.PositiveSmallIntegerField(default=0)
    provision_targets = models.JSONField(default=dict, blank=True,
                                         help_text="node id -> desired generation to reach")
    handover_pending = models.BooleanField(
        default=False, help_text="pushed while a previous holder was still on some of its "
                                 "GPU slots: pushed again once they are free (ADR 0104)")
    teardown_deadline = models.DateTimeField(
        null=True, blank=True, help_text="teardown not observed by then: GPUs quarantined")
    release_kind = models.CharField(max_length=16, blank=True,
                                    help_text="final state once released: ended/expired/…")
    warned_at = models.DateTimeField(null=True, blank=True)
    queue_boost = models.IntegerField(default=0, help_text="operator prioritisation")
    condition = models.CharField(
        max_length=16, choices=Condition.choices, blank=True, default="", db_default="",
        help_text="a running lease whose hardware failed: healing (a replacement is being "
                  "applied) or degraded (none found; the tenant chooses)")
    heal_targets = models.JSONField(default=dict, blank=True, db_default={},
                                    help_text="node id -> desired generation of the repair")
    heal_deadline = models.DateTimeField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True, db_index=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created"]
        indexes = [models.Index(fields=["tenant", "state"])]
        constraints = [
            models.CheckConstraint(condition=Q(end_at__gt=F("start_at")),
                                   name="lease_end_after_start"),
            models.CheckConstraint(condition=Q(gpu_count__gte=1) & Q(nodes__gte=1)
                                   & Q(gpu_milli__gte=1) & Q(gpu_milli__lte=1000),
                                   name="lease_positive_size"),
        ]

    def __str__(self) -> str:
        return self.name or f"lease {str(self.id)[:8]}"

    @property
    def total_gpus(self) -> float:
        return self.gpu_count * self.nodes * self.gpu_milli / 1000

    @property
    def short_id(self) -> str:
        return str(self.id)[:8]


class LeaseEvent(models.Model):
    """One row per state transition (and per notable event): who, when, why."""

    lease = models.ForeignKey(Lease, on_delete=models.CASCADE, related_name="events")
    created = models.DateTimeField(auto_now_add=True)
    from_state = models.CharField(max_length=16, blank=True)
    to_state = models.CharField(max_length=16, blank=True)
    kind = models.CharField(max_length=32, default="transition")
    actor = models.CharField(max_length=150, default="system")
    reason = models.CharField(max_length=300, blank=True)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["created", "id"]

    def __str__(self) -> str:
        return f"{self.lease_id} {self.from_state}->{self.to_state}"


class Allocation(models.Model):
    """One slot (an eighth) of one GPU held by a lease during ``[start_at, end_at)``.

    On PostgreSQL an exclusion constraint (migration 0002) makes two live allocations of
    the same GPU slot with overlapping periods impossible: no GPU is ever double-booked,
    whatever races. ``live`` turns false when the lease releases it.
    """

    lease = models.ForeignKey(Lease, on_delete=models.CASCADE, related_name="allocations")
    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="allocations")
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="allocations")
    slot = models.PositiveSmallIntegerField()
    start_at = models.DateTimeField()
    end_at = models.DateTimeField()
    live = models.BooleanField(default=True)
    mig = models.BooleanField(
        default=False, db_default=False,
        help_text="a memory slice of a MIG instance (ADR 0222): on PostgreSQL an exclusion "
                  "constraint (migration 0010) keeps MIG and whole/fractional slots of one GPU "
                  "from overlapping in time")
    released_generation = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="freed before its teardown was observed: the node's "
        "desired generation that removed its grant; fenced until applied (ADR 0104)")

    class Meta:
        indexes = [models.Index(fields=["gpu", "live"]), models.Index(fields=["lease", "live"])]
        constraints = [
            models.CheckConstraint(condition=Q(slot__lt=SLOTS_PER_GPU), name="allocation_slot"),
            models.CheckConstraint(condition=Q(end_at__gt=F("start_at")),
                                   name="allocation_period"),
            models.UniqueConstraint(fields=["lease", "gpu", "slot"],
                                    name="allocation_unique_per_lease"),
        ]

    def __str__(self) -> str:
        return f"{self.lease_id} gpu {self.gpu_id}#{self.slot}"


class MigInstance(models.Model):
    """One MIG instance a lease holds: its GPU, profile and start slot (memory slices), and
    the ``MIG-…`` UUID once the node's agent reports it (ADR 0222).

    The memory slices it covers are held as ``Allocation`` slots (the allocation exclusion
    constraint keeps two live instances of one GPU off each other's slices, and a whole-GPU
    lease, which holds all eight, off the GPU); ``allocation`` is its start slot's row,
    whose ``live`` is the instance's: every way a lease gives up its slots ends it too.
    """

    lease = models.ForeignKey(Lease, on_delete=models.CASCADE, related_name="mig_instances")
    allocation = models.OneToOneField(Allocation, on_delete=models.CASCADE,
                                      related_name="mig_instance")
    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="mig_instances")
    profile = models.CharField(max_length=32)
    start = models.PositiveSmallIntegerField(help_text="first memory slice (placement start)")
    size = models.PositiveSmallIntegerField(help_text="memory slices")
    uuid = models.CharField(max_length=64, blank=True, default="", help_text="MIG-…")
    gpu_instance_id = models.PositiveIntegerField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["gpu", "start"]
        constraints = [
            models.CheckConstraint(condition=Q(start__lt=SLOTS_PER_GPU) & Q(size__gte=1)
                                   & Q(size__lte=SLOTS_PER_GPU), name="miginstance_slices"),
        ]

    def __str__(self) -> str:
        return f"{self.lease_id} {self.profile}@{self.gpu_id}:{self.start}"


class IdempotencyKey(models.Model):
    """Stripe-style idempotency for order creation, scoped per tenant."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64)
    response_status = models.PositiveSmallIntegerField()
    response_body = models.JSONField()
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "key"], name="idempotency_unique_key"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id}:{self.key}"


class LeaseFault(models.Model):
    """Hardware of a running lease that failed: fenced out at once, replaced if it can be.

    Billing stops for the failed GPUs at ``fault_at`` and starts again for their
    replacement at ``replaced_at`` (ADR 0220): ``[fault_at, settled_at)`` is never billed,
    where ``settled_at`` is ``replaced_at``, or the lease's end when nothing replaced it.
    """

    class Resolution(models.TextChoices):
        OPEN = "", "Open"
        REPLACED = "replaced", "Replaced"
        SMALLER = "continued_smaller", "Continued smaller"
        RELEASED = "released", "Released"
        ENDED = "ended", "Lease ended"

    lease = models.ForeignKey(Lease, on_delete=models.CASCADE, related_name="faults")
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="+")
    gpu_indexes = models.JSONField(default=list, help_text="the lease's GPUs there that failed")
    gpus = models.DecimalField(max_digits=10, decimal_places=3,
                               help_text="GPU equivalents lost (slots / 8)")
    cause = models.CharField(max_length=300)
    fault_at = models.DateTimeField(help_text="billing stops here for the failed GPUs")
    fenced_at = models.DateTimeField()
    replacement = models.JSONField(default=dict, blank=True,
                                   help_text="{node: hostname, gpu_indexes: [...]}")
    replaced_at = models.DateTimeField(null=True, blank=True,
                                       help_text="the replacement converged (billing resumes)")
    resolution = models.CharField(max_length=20, choices=Resolution.choices, blank=True,
                                  default="")
    resolved_at = models.DateTimeField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["fault_at", "id"]
        indexes = [models.Index(fields=["lease", "resolution"])]
        constraints = [
            models.CheckConstraint(condition=Q(gpus__gt=0), name="leasefault_gpus_positive"),
            models.CheckConstraint(condition=Q(replaced_at__isnull=True)
                                   | Q(replaced_at__gte=F("fault_at")),
                                   name="leasefault_replaced_after_fault"),
        ]

    def __str__(self) -> str:
        return f"{self.lease_id} {self.node_id} {self.cause}"
