"""The operators' MIG actions over REST (platform staff only): the fixed layout import
(ADR 0238) and the switch to whole or dynamic (``portal.leasing.migmode``)."""

from __future__ import annotations

from typing import Any

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.core.api.serializers import StrictSerializer
from portal.inventory.models import Node
from portal.leasing import miglayout, migmode
from portal.tenants.authentication import IsPlatformStaff


def _node_and_body(request: Request, hostname: str,
                   serializer: type[StrictSerializer]) -> tuple[Node, dict[str, Any]]:
    """The node named in the URL (404 where there is none) and the request's body, checked
    by ``serializer`` (400 naming the field where it is bad)."""
    node = get_object_or_404(Node, hostname=hostname)
    body = serializer(data=request.data)
    body.is_valid(raise_exception=True)
    return node, body.validated_data


class MigLayoutImportSerializer(StrictSerializer):
    config = serializers.CharField(max_length=miglayout.MAX_FILE_CHARS, trim_whitespace=False,
                                   help_text="the mig-parted config file (YAML, version v1)")
    name = serializers.CharField(max_length=200, help_text="the config of mig-configs to apply")
    gpu = serializers.IntegerField(min_value=0, max_value=255, required=False, allow_null=True,
                                   help_text="only this GPU (its own override); "
                                             "absent: the whole node")


class NodeMigLayoutView(APIView):
    """Apply a named config of a mig-parted file to a node (or one of its GPUs)."""

    permission_classes = [IsPlatformStaff]

    @extend_schema(request=MigLayoutImportSerializer, responses={200: dict})
    def post(self, request: Request, **kwargs: Any) -> Response:
        node, data = _node_and_body(request, kwargs["hostname"], MigLayoutImportSerializer)
        return Response(miglayout.apply_config(actor=request.user, node=node,
                                               text=data["config"], name=data["name"],
                                               gpu_index=data.get("gpu")))


class MigModeSerializer(StrictSerializer):
    mode = serializers.ChoiceField(
        choices=[*migmode.MODES, "fixed"],
        help_text="whole, dynamic, or (with gpu) inherit: the GPU follows its node again; "
                  "fixed is refused here, a fixed layout is imported (mig-layout)")
    gpu = serializers.IntegerField(min_value=0, max_value=255, required=False, allow_null=True,
                                   help_text="only this GPU (its own mode); absent: the node")
    reason = serializers.CharField(max_length=migmode.MAX_REASON_CHARS,
                                   help_text="why, for the audit log")


class NodeMigModeView(APIView):
    """Switch a node (or one of its GPUs) to whole or dynamic MIG use; 409 while that would
    destroy a leased instance."""

    permission_classes = [IsPlatformStaff]

    @extend_schema(request=MigModeSerializer, responses={200: dict})
    def put(self, request: Request, **kwargs: Any) -> Response:
        node, data = _node_and_body(request, kwargs["hostname"], MigModeSerializer)
        return Response(migmode.change_mode(actor=request.user, node=node, mode=data["mode"],
                                            reason=data["reason"], gpu_index=data.get("gpu")))
