"""The service lifecycle over REST (platform staff only): the repair queue, a node's or
GPU's transitions, and the operators' actions (``services.operator``)."""

from __future__ import annotations

from typing import Any

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.core.api.serializers import StrictSerializer
from portal.fleet import lifecycle
from portal.fleet.models import ServiceEvent
from portal.fleet.services import operator
from portal.inventory.models import Gpu, Node, Service
from portal.tenants.authentication import IsPlatformStaff


class ServiceActionSerializer(StrictSerializer):
    action = serializers.ChoiceField(choices=list(operator.ACTIONS))
    reason = serializers.CharField(max_length=250)
    level = serializers.IntegerField(min_value=1, max_value=3, required=False, default=2,
                                     help_text="DCGM level for validate (1 readiness, 2 "
                                               "after a failure, 3 before returning)")


class PartSerializer(serializers.Serializer[None]):
    node = serializers.CharField()
    gpu = serializers.IntegerField(allow_null=True)
    service = serializers.ChoiceField(choices=Service.choices)
    cause = serializers.CharField()
    since = serializers.DateTimeField(allow_null=True)
    age_s = serializers.IntegerField(allow_null=True)
    flapping = serializers.BooleanField()


class ServiceEventSerializer(serializers.ModelSerializer[ServiceEvent]):
    gpu = serializers.IntegerField(source="gpu.index", allow_null=True, read_only=True)

    class Meta:
        model = ServiceEvent
        fields = ["created", "gpu", "from_state", "to_state", "cause", "rule", "actor"]
        read_only_fields = fields


def _row(part: Node | Gpu) -> dict[str, Any]:
    node = part if isinstance(part, Node) else part.node
    return {"node": node.hostname, "gpu": None if isinstance(part, Node) else part.index,
            "service": part.service, "cause": part.service_cause, "since": part.service_since,
            "age_s": None, "flapping": lifecycle.flapping(part)}


class _Act(APIView):
    permission_classes = [IsPlatformStaff]

    def part(self, **kwargs: Any) -> Node | Gpu:
        raise NotImplementedError

    def post(self, request: Request, **kwargs: Any) -> Response:
        body = ServiceActionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        part = operator.service_act(actor=request.user, part=self.part(**kwargs),
                                    **body.validated_data)
        return Response(PartSerializer(_row(part)).data)


class NodeServiceView(_Act):
    """Cordon, uncordon, send to repair, validate or return a node (with a reason)."""

    def part(self, **kwargs: Any) -> Node:
        return get_object_or_404(Node, hostname=kwargs["hostname"])

    @extend_schema(request=ServiceActionSerializer, responses=PartSerializer)
    def post(self, request: Request, **kwargs: Any) -> Response:
        return super().post(request, **kwargs)

    @extend_schema(responses=ServiceEventSerializer(many=True))
    def get(self, request: Request, **kwargs: Any) -> Response:
        """The node's (and its GPUs') service transitions, newest first."""
        node = self.part(**kwargs)
        events = ServiceEvent.objects.filter(node=node).select_related("gpu") \
            .order_by("-created", "-id")[:200]
        return Response(ServiceEventSerializer(events, many=True).data)


class GpuServiceView(_Act):
    """The same actions for one GPU (by its NVML UUID)."""

    def part(self, **kwargs: Any) -> Gpu:
        return get_object_or_404(Gpu.objects.select_related("node"), uuid=kwargs["uuid"])

    @extend_schema(request=ServiceActionSerializer, responses=PartSerializer)
    def post(self, request: Request, **kwargs: Any) -> Response:
        return super().post(request, **kwargs)


class RepairQueueView(APIView):
    """Nodes and GPUs out of service, oldest first, with their age and cause."""

    permission_classes = [IsPlatformStaff]

    @extend_schema(responses=PartSerializer(many=True))
    def get(self, request: Request) -> Response:
        return Response(PartSerializer(lifecycle.repair_queue(), many=True).data)
