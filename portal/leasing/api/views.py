from __future__ import annotations

from dataclasses import asdict
from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.leasing import idempotency, quoting, selectors, services
from portal.leasing.api import serializers as s
from portal.leasing.models import Lease
from portal.tenants import access
from portal.tenants.models import Role

IDEMPOTENCY_HEADER = OpenApiParameter(
    "Idempotency-Key", str, OpenApiParameter.HEADER, required=False,
    description="Same key + same body → the original response; different body → 422; "
                "while the first is still running → 409.")


def _spec(request: Request) -> services.OrderSpec:
    body = s.OrderSerializer(data=request.data)
    body.is_valid(raise_exception=True)
    return services.OrderSpec(**body.validated_data)


class OrderView(APIView):
    """Order GPUs. The lease comes back queued; watch it become active."""

    @extend_schema(request=s.OrderSerializer, responses={201: s.LeaseSerializer},
                   parameters=[IDEMPOTENCY_HEADER])
    def post(self, request: Request) -> Response:
        tenant = access.require_active_tenant(request, Role.MEMBER)
        spec = _spec(request)

        def create() -> tuple[int, dict[str, Any]]:
            lease = services.order_create(actor=request.user, tenant=tenant, spec=spec,
                                          idempotency_key=key or None)
            return status.HTTP_201_CREATED, dict(s.LeaseSerializer(lease).data)

        def once() -> tuple[int, dict[str, Any]]:
            if key:
                return idempotency.run(tenant=tenant, key=key, body=request.data, create=create)
            return create()

        key = request.headers.get("Idempotency-Key", "")
        # A refusal by policy is recorded as a REJECTED lease, then answered as before.
        code, data = services.order_submit(actor=request.user, tenant=tenant, spec=spec,
                                           create=once)
        return Response(data, status=code)


class QuoteView(APIView):
    """Preview an order: price, earliest start, quota/budget fit, alternatives."""

    @extend_schema(request=s.OrderSerializer, responses=s.QuoteSerializer)
    def post(self, request: Request) -> Response:
        tenant = access.require_active_tenant(request, Role.VIEWER)
        result = quoting.order_quote(actor=request.user, tenant=tenant, spec=_spec(request))
        return Response(s.QuoteSerializer(asdict(result)).data)


class LeaseViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin,
                   viewsets.GenericViewSet):  # type: ignore[type-arg]
    """Your tenant's leases. Filters: ``?state=active,queued``, ``?model=H100``."""

    serializer_class = s.LeaseSerializer
    queryset = Lease.objects.none()

    def get_queryset(self) -> Any:
        tenant = access.require_active_tenant(self.request, Role.VIEWER) \
            if not access.is_staff(self.request.user) else access.active_tenant(self.request)
        params = self.request.query_params
        return selectors.lease_list(user=self.request.user, tenant=tenant,
                                    state=params.get("state"), model=params.get("model"))

    def get_object(self) -> Lease:
        return selectors.lease_get(user=self.request.user, lease_id=self.kwargs["pk"])

    def _act(self, request: Request, serializer: Any, service: Any) -> Response:
        """Parse the body, call one lease service, render the lease."""
        body = serializer(data=request.data)
        body.is_valid(raise_exception=True)
        lease = service(actor=request.user, lease=self.get_object(), **body.validated_data)
        return Response(s.LeaseSerializer(lease).data)

    @extend_schema(request=s.ReasonSerializer, responses=s.LeaseSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        """Cancel before the lease is active."""
        return self._act(request, s.ReasonSerializer, services.lease_cancel)

    @extend_schema(request=s.ReasonSerializer, responses=s.LeaseSerializer)
    @action(detail=True, methods=["post"])
    def release(self, request: Request, pk: str) -> Response:
        """Release an active lease early (billing stops now)."""
        return self._act(request, s.ReasonSerializer, services.lease_release)

    @extend_schema(request=s.ExtendSerializer, responses=s.LeaseSerializer)
    @action(detail=True, methods=["post"])
    def extend(self, request: Request, pk: str) -> Response:
        """Move the end later. Refused (400) with the longest possible end when it can't."""
        return self._act(request, s.ExtendSerializer, services.lease_extend)

    @extend_schema(request=s.DegradedChoiceSerializer, responses=s.LeaseSerializer)
    @action(detail=True, methods=["post"])
    def degraded(self, request: Request, pk: str) -> Response:
        """A degraded lease (hardware failed, no replacement free): continue smaller, wait
        for a replacement, or release. 409 when the lease is not degraded."""
        return self._act(request, s.DegradedChoiceSerializer, services.lease_degraded_choose)

    @extend_schema(responses=s.LeaseFaultSerializer(many=True))
    @action(detail=True, methods=["get"])
    def faults(self, request: Request, pk: str) -> Response:
        """Hardware of this lease that failed, what replaced it and when (not billed from
        the fault until the replacement was active)."""
        rows = selectors.lease_faults(lease=self.get_object())
        return Response(s.LeaseFaultSerializer(rows, many=True).data)

    @extend_schema(responses=s.LeaseEventSerializer(many=True))
    @action(detail=True, methods=["get"])
    def events(self, request: Request, pk: str) -> Response:
        events = selectors.lease_events(lease=self.get_object())
        return Response(s.LeaseEventSerializer(events, many=True).data)

    @extend_schema(responses=s.ConnectionSerializer)
    @action(detail=True, methods=["get"])
    def connection(self, request: Request, pk: str) -> Response:
        """Nodes, GPU UUIDs, the partition key and SSH endpoints."""
        return Response(selectors.lease_connection(lease=self.get_object()))


class QuotaView(APIView):
    """Your tenant's quotas and budget, with what is in use."""

    @extend_schema(responses=s.QuotaUsageSerializer(many=True))
    def get(self, request: Request) -> Response:
        tenant = access.require_active_tenant(request, Role.VIEWER)
        return Response(s.QuotaUsageSerializer(selectors.quota_usage(tenant=tenant),
                                               many=True).data)
