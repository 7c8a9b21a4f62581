"""Billing API: exports, invoices, budget, showback. Tenants see their own (access gate;
through a key, the key's tenant only), staff see every tenant (or one, with ``?tenant=``)."""

from __future__ import annotations

from datetime import date
from typing import Any

from django.http import HttpResponse, StreamingHttpResponse
from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.billing import exports, selectors, statements
from portal.core.errors import ApplicationError, NotFound
from portal.tenants import access
from portal.tenants.models import Role, Tenant

PERIOD = [OpenApiParameter("from", str, description="YYYY-MM-DD (UTC, inclusive)"),
          OpenApiParameter("to", str, description="YYYY-MM-DD (UTC, exclusive)"),
          OpenApiParameter("tenant", str, description="tenant slug (staff: default all)")]


def resolve_tenant(request: Any) -> Tenant | None:
    """The tenant whose data a request may read; ``None`` means all (platform staff only).

    Decided on the principal (user + credential): through an API key, only the key's own
    tenant — ``?tenant=`` naming any other is a 404, and a staff key bound to a tenant does
    not see all tenants.
    """
    principal = access.of_request(request)
    slug = request.query_params.get("tenant") if hasattr(request, "query_params") \
        else request.GET.get("tenant")
    if slug:
        return access.get_tenant(principal, slug)
    if principal.platform_staff and access.active_tenant(request) is None:
        return None
    return access.require_active_tenant(request)


def stream(request: Any, fmt: str, tenant: Tenant | None) -> StreamingHttpResponse:
    params = request.GET
    start = exports.parse_day(params.get("from"), "from")
    end = exports.parse_day(params.get("to"), "to")
    body = exports.export(fmt, tenant=tenant, start=start, end=end)
    response = StreamingHttpResponse(body, content_type=exports.FORMATS[fmt])
    response["Content-Disposition"] = \
        f'attachment; filename="{exports.filename(fmt, start, end)}"'
    return response


class UsageExportView(APIView):
    """Usage lines as CSV, or FinOps FOCUS v1.2 as CSV or JSON Lines, streamed."""

    @extend_schema(parameters=[OpenApiParameter("type", str, enum=list(exports.FORMATS)),
                               *PERIOD], responses={(200, "text/csv"): str})
    def get(self, request: Request) -> StreamingHttpResponse:
        tenant = resolve_tenant(request)
        return stream(request, request.query_params.get("type", "focus-csv"), tenant)


def _month(request: Request) -> date:
    raw = request.query_params.get("month")
    if not raw:
        return selectors.current_month()
    day = exports.parse_day(f"{raw}-01" if len(raw) == 7 else raw, "month")
    return date(day.year, day.month, 1)


class InvoiceListView(APIView):
    @extend_schema(parameters=PERIOD[2:], responses=dict)
    def get(self, request: Request) -> Response:
        tenant = resolve_tenant(request)
        rows = selectors.invoices(tenant=tenant).values(
            "tenant__slug", "month", "currency", "status", "usage_total", "credit_total",
            "total", "line_count", "finalized_at")[:500]
        return Response({"results": [{**r, "tenant": r.pop("tenant__slug")} for r in rows]})


class InvoiceCsvView(APIView):
    """One month's invoice of your tenant as CSV (tenant admins; the page's file)."""

    @extend_schema(operation_id="billing_invoice_csv", responses={(200, "text/csv"): str})
    def get(self, request: Request, year: int, month: int) -> HttpResponse:
        tenant = access.require_active_tenant(request, Role.ADMIN)
        try:
            doc = statements.statement(tenant=tenant, month=date(year, month, 1))
        except ValueError:
            doc = None
        if doc is None:
            raise NotFound(_("No such invoice."))
        name, text = statements.statement_csv(doc)
        response = HttpResponse(text, content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response


class BudgetView(APIView):
    @extend_schema(parameters=[OpenApiParameter("month", str), *PERIOD[2:]], responses=dict)
    def get(self, request: Request) -> Response:
        tenant = resolve_tenant(request)
        if tenant is None:
            raise ApplicationError("Name a tenant: ?tenant=slug.", fields={"tenant": ["needed"]})
        return Response(selectors.budget_usage(tenant=tenant, month=_month(request)))


class ShowbackView(APIView):
    @extend_schema(parameters=PERIOD, responses=dict)
    def get(self, request: Request) -> Response:
        tenant = resolve_tenant(request)
        start = exports.parse_day(request.query_params.get("from"), "from")
        end = exports.parse_day(request.query_params.get("to"), "to")
        return Response(selectors.showback(tenant=tenant, start=start, end=end))
