from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal.core.api.serializers import StrictSerializer
from portal.leasing import selectors
from portal.leasing.limits import (
    MAX_DURATION_HOURS,
    MAX_GPUS_PER_NODE,
    MAX_MIG_INSTANCES_PER_NODE,
    MAX_NODES,
)
from portal.leasing.models import Lease, LeaseEvent, LeaseFault, Locality, Priority


class OrderSerializer(StrictSerializer):
    """An order: N GPUs (or a fraction of one) of some model(s), for a time window."""

    models = serializers.ListField(child=serializers.CharField(max_length=32), required=False,
                                   default=list, max_length=16,
                                   help_text="acceptable models; empty = any")
    gpu_count = serializers.IntegerField(min_value=1, max_value=MAX_MIG_INSTANCES_PER_NODE,
                                         default=1,
                                         help_text="GPUs per node (at most "
                                                   f"{MAX_GPUS_PER_NODE}); with mig_profile: "
                                                   "MIG instances, on one node")
    gpu_milli = serializers.IntegerField(min_value=125, max_value=1000, default=1000,
                                         help_text="<1000: that share of one GPU (steps of 125)")
    mig_profile = serializers.CharField(
        max_length=32, required=False, default="", allow_blank=True,
        help_text="a MIG profile of the ordered model(s), e.g. 1g.10gb: isolated instances "
                  "that may share a GPU with other tenants' (ADR 0222)")
    nodes = serializers.IntegerField(min_value=1, max_value=MAX_NODES, default=1,
                                     help_text="gang size: nodes × gpu_count, all or nothing")
    locality = serializers.ChoiceField(choices=Locality.choices, default=Locality.ANY)
    locality_required = serializers.BooleanField(default=False)
    priority = serializers.ChoiceField(choices=Priority.choices, default=Priority.ON_DEMAND)
    start_at = serializers.DateTimeField(required=False, allow_null=True, default=None)
    duration_hours = serializers.DecimalField(max_digits=8, decimal_places=2, required=False,
                                              allow_null=True, default=None, min_value=0,
                                              max_value=MAX_DURATION_HOURS)
    end_at = serializers.DateTimeField(required=False, allow_null=True, default=None)
    name = serializers.CharField(max_length=100, required=False, default="", allow_blank=True)
    tags = serializers.DictField(child=serializers.CharField(max_length=200), required=False,
                                 default=dict)

    def validate_tags(self, value: dict[str, str]) -> dict[str, str]:
        if len(value) > 32 or any(len(k) > 64 for k in value):
            raise serializers.ValidationError(_("At most 32 tags, keys up to 64 characters."))
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs.get("duration_hours") is None and attrs.get("end_at") is None:
            raise serializers.ValidationError(
                {"duration_hours": [_("Give a duration or an end.")]})
        return attrs


class MigDeviceSerializer(serializers.Serializer[None]):
    node = serializers.CharField()
    gpu_index = serializers.IntegerField()
    profile = serializers.CharField()
    start = serializers.IntegerField()
    uuid = serializers.CharField(help_text="MIG-…; empty until the agent reports it")
    pending_reset = serializers.BooleanField(
        help_text="true while the GPU's MIG mode change waits for a GPU reset (the instance "
                  "is made after it)")


class LeaseSerializer(serializers.ModelSerializer[Lease]):
    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    total_gpus = serializers.FloatField(read_only=True)
    models = serializers.ListField(source="allowed_models", child=serializers.CharField(),
                                   read_only=True)
    queue_position = serializers.SerializerMethodField(
        help_text="1-based place in the queue while it waits to start now; null otherwise.")
    devices = serializers.SerializerMethodField(
        help_text="the lease's MIG instances: node, GPU index, profile, start slot and the "
                  "MIG-… UUID once the node reported it (empty for whole GPUs)")
    cuda_visible_devices = serializers.SerializerMethodField(
        help_text="CUDA_VISIBLE_DEVICES for a MIG lease (its MIG-… UUIDs, comma-separated) "
                  "once all are reported; null otherwise")

    class Meta:
        model = Lease
        fields = ["id", "name", "tenant", "state", "condition", "state_reason", "wait_reason",
                  "earliest_start", "queue_position", "gpu_model", "models", "gpu_count",
                  "gpu_milli", "mig_profile", "devices", "cuda_visible_devices", "nodes",
                  "total_gpus", "locality", "locality_required", "priority", "start_at",
                  "end_at", "active_at", "ended_at", "created", "tags"]
        read_only_fields = fields


    @extend_schema_field(MigDeviceSerializer(many=True))
    def get_devices(self, lease: Lease) -> list[dict[str, Any]]:
        return selectors.mig_devices(lease) if lease.mig_profile else []

    def get_cuda_visible_devices(self, lease: Lease) -> str | None:
        if not lease.mig_profile:
            return None
        return selectors.cuda_visible_devices(selectors.mig_devices(lease))

    def get_queue_position(self, lease: Lease) -> int | None:
        """Computed once per response (a list shares one reading of the queue)."""
        if lease.state != "queued":
            return None
        if "queue_positions" not in self.context:
            self.context["queue_positions"] = selectors.queue_positions()
        return self.context["queue_positions"].get(str(lease.id))  # type: ignore[no-any-return]


class LeaseEventSerializer(serializers.ModelSerializer[LeaseEvent]):
    class Meta:
        model = LeaseEvent
        fields = ["created", "kind", "from_state", "to_state", "actor", "reason", "data"]
        read_only_fields = fields


class LeaseFaultSerializer(serializers.ModelSerializer[LeaseFault]):
    """Hardware of the lease that failed: when, what replaced it, what was not billed."""

    node = serializers.CharField(source="node.hostname", read_only=True)

    class Meta:
        model = LeaseFault
        fields = ["node", "gpu_indexes", "gpus", "cause", "fault_at", "fenced_at",
                  "replacement", "replaced_at", "resolution", "resolved_at"]
        read_only_fields = fields


class DegradedChoiceSerializer(StrictSerializer):
    choice = serializers.ChoiceField(
        choices=["continue", "wait", "release"],
        help_text="continue smaller, wait for a replacement (ahead of new orders), or "
                  "release; the failed part is not charged either way")


class ExtendSerializer(StrictSerializer):
    end_at = serializers.DateTimeField()


class ReasonSerializer(StrictSerializer):
    reason = serializers.CharField(max_length=300, required=False, default="", allow_blank=True)


class QuoteSerializer(serializers.Serializer[None]):
    price = serializers.DecimalField(max_digits=14, decimal_places=2)
    currency = serializers.CharField()
    placeable_now = serializers.BooleanField()
    earliest_start = serializers.DateTimeField(allow_null=True)
    reason = serializers.CharField(allow_null=True)
    fits_quota = serializers.BooleanField()
    fits_budget = serializers.BooleanField()
    model = serializers.CharField(allow_null=True)
    unit_price = serializers.DecimalField(max_digits=14, decimal_places=4, allow_null=True,
                                          help_text="per GPU-hour at the start, in currency")
    alternatives = serializers.ListField(child=serializers.DictField())
    messages = serializers.ListField(child=serializers.CharField())


class QuotaUsageSerializer(serializers.Serializer[None]):
    gpu_model = serializers.CharField(allow_null=True)
    max_gpus = serializers.IntegerField()
    guaranteed_gpus = serializers.IntegerField()
    in_use_gpus = serializers.DecimalField(max_digits=10, decimal_places=3, allow_null=True)
    gpu_hour_budget = serializers.DecimalField(max_digits=12, decimal_places=2, allow_null=True)
    gpu_hours_this_month = serializers.DecimalField(max_digits=14, decimal_places=2)
    gpu_hours_metered = serializers.DecimalField(max_digits=14, decimal_places=2)
    gpu_hours_committed = serializers.DecimalField(max_digits=14, decimal_places=2)
    max_lease_hours = serializers.IntegerField()
    max_pending_orders = serializers.IntegerField()
    allow_spot = serializers.BooleanField()
    allow_borrowing = serializers.BooleanField()


class ConnectionSerializer(serializers.Serializer[None]):
    account = serializers.CharField()
    pkey = serializers.CharField(allow_null=True)
    nodes = serializers.ListField(child=serializers.DictField())
