from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.inventory import selectors, services
from portal.inventory.api import serializers as s
from portal.tenants.authentication import IsPlatformStaff


class NodeViewSet(viewsets.ReadOnlyModelViewSet):  # type: ignore[type-arg]
    """Nodes (platform staff only). Filter with ``?state=`` and ``?model=``."""

    permission_classes = [IsPlatformStaff]
    lookup_field = "hostname"
    lookup_value_regex = r"[A-Za-z0-9._-]+"

    def get_queryset(self) -> Any:
        qs = selectors.node_list()
        if state := self.request.query_params.get("state"):
            qs = qs.filter(state=state)
        if model := self.request.query_params.get("model"):
            qs = qs.filter(gpu_model=model)
        if self.action == "retrieve":
            qs = qs.prefetch_related("gpus", "hca_ports__switch")
        return qs

    def get_serializer_class(self) -> Any:
        if self.action == "retrieve":
            return s.NodeDetailSerializer
        if self.action == "set_state":
            return s.NodeStateSerializer
        return s.NodeSerializer

    @extend_schema(request=s.NodeStateSerializer, responses=s.NodeSerializer)
    @action(detail=True, methods=["post"], url_path="state")
    def set_state(self, request: Request, hostname: str | None = None) -> Response:
        """Drain, undrain, mark down or put a node in maintenance."""
        node = self.get_object()
        body = s.NodeStateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        node = services.node_set_state(actor=request.user, node=node, **body.validated_data)
        node = selectors.node_list().get(pk=node.pk)
        return Response(s.NodeSerializer(node).data)


class GpuViewSet(viewsets.ReadOnlyModelViewSet):  # type: ignore[type-arg]
    """GPUs (platform staff only)."""

    permission_classes = [IsPlatformStaff]
    serializer_class = s.GpuSerializer

    def get_queryset(self) -> Any:
        qs = selectors.gpu_list()
        if model := self.request.query_params.get("model"):
            qs = qs.filter(model=model)
        if health := self.request.query_params.get("health"):
            qs = qs.filter(health=health)
        return qs


class SwitchViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):  # type: ignore[type-arg]
    permission_classes = [IsPlatformStaff]
    serializer_class = s.SwitchSerializer

    def get_queryset(self) -> Any:
        return selectors.switch_list()


class FabricViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):  # type: ignore[type-arg]
    permission_classes = [IsPlatformStaff]
    serializer_class = s.FabricSerializer

    def get_queryset(self) -> Any:
        return selectors.fabric_list()


class CapacityView(APIView):
    """What the pool holds, per GPU model (every signed-in user)."""

    permission_classes = [IsAuthenticated]

    @extend_schema(responses=s.CapacitySerializer(many=True))
    def get(self, request: Request) -> Response:
        return Response(s.CapacitySerializer(selectors.capacity_by_model(), many=True).data)


class StorageEndpointViewSet(mixins.ListModelMixin, mixins.DestroyModelMixin,
                             viewsets.GenericViewSet):  # type: ignore[type-arg]
    """Storage HCA ports per fabric (platform staff only): every tenant partition on the
    fabric includes them as limited members. ``?fabric=<name>`` filters."""

    permission_classes = [IsPlatformStaff]
    serializer_class = s.StorageEndpointSerializer

    def get_queryset(self) -> Any:
        qs = selectors.storage_endpoint_list()
        if fabric := self.request.query_params.get("fabric"):
            qs = qs.filter(fabric__name=fabric)
        return qs

    @extend_schema(request=s.StorageEndpointInputSerializer,
                   responses={201: s.StorageEndpointSerializer(many=True)})
    def create(self, request: Request) -> Response:
        """Declare storage by ``port_guid`` or ``node_name``; answers the port(s) declared."""
        body = s.StorageEndpointInputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        rows = services.storage_endpoint_add(actor=request.user, **body.validated_data)
        return Response(s.StorageEndpointSerializer(rows, many=True).data, status=201)

    def perform_destroy(self, instance: Any) -> None:
        services.storage_endpoint_remove(actor=self.request.user, endpoint=instance)
