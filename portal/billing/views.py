"""Billing page downloads: the same streamed exports as the API, through the access gate;
a month's invoice as CSV or as a printable page (tenant admins; staff)."""

from __future__ import annotations

import csv
import io
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
    doc = _statement(request, year, month)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["kind", "lease_id", "description", "gpu_model", "priority", "gpu_hours",
                     "unit_price", "amount", "currency"])
    for line in doc.lines:
        writer.writerow(["usage", line["lease"], line["name"], line["gpu_model"],
                         line["priority"], f"{line['gpu_hours']:f}", f"{line['unit_price']:f}",
                         f"{line['cost']:f}", line["currency"]])
    for credit in doc.credits:
        writer.writerow([credit["category"].lower(), "", credit["description"], "", "", "", "",
                         f"{credit['amount']:f}", credit["currency"]])
    currency = doc.invoice.currency
    for name in ("usage_total", "credit_total", "total"):
        writer.writerow([name, "", "", "", "", "", "", f"{doc.totals[name]:f}", currency])
    response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
    status = "draft" if doc.is_draft else "final"
    response["Content-Disposition"] = (f'attachment; filename="gpupool-invoice-'
                                       f'{doc.invoice.tenant.slug}-{year:04d}-{month:02d}-'
                                       f'{status}.csv"')
    return response
