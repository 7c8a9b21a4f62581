"""The fixed MIG layout import over REST (platform staff only, ADR 0238)."""

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
from portal.leasing import miglayout
from portal.tenants.authentication import IsPlatformStaff


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
        node = get_object_or_404(Node, hostname=kwargs["hostname"])
        body = MigLayoutImportSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        return Response(miglayout.apply_config(actor=request.user, node=node,
                                               text=data["config"], name=data["name"],
                                               gpu_index=data.get("gpu")))
