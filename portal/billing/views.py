"""Billing page downloads: the same streamed exports as the API, through the access gate."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest

from portal.billing.api.views import resolve_tenant, stream
from portal.core.errors import ApplicationError, NotFound


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
