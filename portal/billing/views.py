"""Billing page downloads: the same streamed exports as the API, through the access gate;
a month's invoice as CSV or as a printable page (tenant admins; staff)."""

from __future__ import annotations

from datetime import date

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.utils.translation import gettext as _

from portal.billing import statements
from portal.billing.api.views import resolve_tenant, stream
from portal.core.errors import ApplicationError, NotFound, PermissionDenied
from portal.tenants import access
from portal.tenants.models import Role


@login_required
def export(request: HttpRequest) -> HttpResponse:
    """``?type=csv|focus-csv|focus-jsonl&from=&to=`` for the active tenant (staff: all)."""
    try:
        tenant = resolve_tenant(request)
        return stream(request, request.GET.get("type", "focus-csv"), tenant)
    except NotFound as exc:
        raise Http404(exc.message) from exc
    except ApplicationError as exc:
        return HttpResponseBadRequest(exc.message)


def _statement(request: HttpRequest, year: int, month: int) -> statements.Statement:
    """The active tenant's invoice of that month; needs the tenant's admin role (or staff)."""
    try:
        tenant = access.require_active_tenant(request, Role.ADMIN)
        first = date(year, month, 1)
    except (NotFound, ValueError) as exc:
        raise Http404(_("No such invoice.")) from exc
    except PermissionDenied as exc:
        from django.core.exceptions import PermissionDenied as Forbidden

        raise Forbidden(exc.message) from exc
    found = statements.statement(tenant=tenant, month=first)
    if found is None:
        raise Http404(_("No such invoice."))
    return found


@login_required
def invoice_page(request: HttpRequest, year: int, month: int) -> HttpResponse:
    doc = _statement(request, year, month)
    return render(request, "web/invoice.html", {"doc": doc, "tenant": doc.invoice.tenant})


@login_required
def invoice_csv(request: HttpRequest, year: int, month: int) -> HttpResponse:
    name, text = statements.statement_csv(_statement(request, year, month))
    response = HttpResponse(text, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response
