"""``/api/v1/webhooks``: the active tenant's endpoints, for its owners and admins only."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from portal.core.api.serializers import EmptyBodySerializer
from portal.tenants import access
from portal.tenants.models import Role, Tenant
from portal.webhooks import selectors, services
from portal.webhooks.api import serializers as s
from portal.webhooks.models import Endpoint, Message


def _tenant(request: Request) -> Tenant:
    return access.require_active_tenant(request, Role.ADMIN)


def _issued(issued: services.IssuedEndpoint) -> dict[str, Any]:
    out = dict(s.EndpointIssuedSerializer(issued.endpoint).data)
    out["secret"] = issued.secret
    return out


class WebhookViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin,
                     viewsets.GenericViewSet):  # type: ignore[type-arg]
    """Outbound webhook endpoints of your tenant (owners and admins). POST answers with the
    signing secret, once; `rotate-secret` issues a new one (the old one keeps signing for
    a day); `deliveries` is the log of messages and tries."""

    serializer_class = s.EndpointSerializer
    queryset = Endpoint.objects.none()  # typing for the schema; get_queryset scopes
    lookup_value_regex = "[0-9a-fA-F-]{36}"

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):
            return Endpoint.objects.none()
        return selectors.endpoint_list(tenant=_tenant(self.request))

    def get_object(self) -> Endpoint:
        return selectors.endpoint_get(tenant=_tenant(self.request), endpoint_id=self.kwargs["pk"])

    @extend_schema(request=s.EndpointCreateSerializer, responses={201: s.EndpointIssuedSerializer})
    def create(self, request: Request) -> Response:
        tenant = _tenant(request)
        body = s.EndpointCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        issued = services.endpoint_create(actor=request.user, tenant=tenant,
                                          **body.validated_data)
        return Response(_issued(issued), status=status.HTTP_201_CREATED)

    @extend_schema(request=s.EndpointUpdateSerializer, responses=s.EndpointSerializer)
    def partial_update(self, request: Request, pk: str) -> Response:
        endpoint = self.get_object()
        body = s.EndpointUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        endpoint = services.endpoint_update(actor=request.user, endpoint=endpoint,
                                            **body.validated_data)
        return Response(s.EndpointSerializer(endpoint).data)

    def destroy(self, request: Request, pk: str) -> Response:
        services.endpoint_delete(actor=request.user, endpoint=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=EmptyBodySerializer, responses=s.EndpointIssuedSerializer)
    @action(detail=True, methods=["post"], url_path="rotate-secret")
    def rotate_secret(self, request: Request, pk: str) -> Response:
        EmptyBodySerializer(data=request.data).is_valid(raise_exception=True)
        issued = services.endpoint_rotate_secret(actor=request.user, endpoint=self.get_object())
        return Response(_issued(issued))

    @extend_schema(responses=s.MessageSerializer(many=True))
    @action(detail=True, methods=["get"])
    def deliveries(self, request: Request, pk: str) -> Response:
        page = self.paginate_queryset(selectors.message_list(endpoint=self.get_object()))
        return self.get_paginated_response(s.MessageSerializer(page, many=True).data)


class DeliveryViewSet(viewsets.GenericViewSet):  # type: ignore[type-arg]
    """A message of the delivery log: `resend` sends it again now, under the same
    `webhook-id` (one try)."""

    serializer_class = s.MessageSerializer
    queryset = Message.objects.none()
    lookup_value_regex = "[0-9a-fA-F-]{36}"

    @extend_schema(request=EmptyBodySerializer, responses=s.MessageSerializer)
    @action(detail=True, methods=["post"])
    def resend(self, request: Request, pk: str) -> Response:
        EmptyBodySerializer(data=request.data).is_valid(raise_exception=True)
        message = selectors.message_get(tenant=_tenant(request), message_id=pk)
        message = services.message_resend(actor=request.user, message=message)
        return Response(s.MessageSerializer(message).data)
