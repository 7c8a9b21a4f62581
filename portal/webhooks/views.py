"""Pages for tenant owners and admins: endpoints (the secret shown once), their events,
the delivery log with response codes and "send again", rotation, deletion."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from portal.core.errors import ApplicationError
from portal.tenants.models import Role
from portal.web.views._common import apply_errors, tenant_page
from portal.webhooks import selectors, services
from portal.webhooks.forms import EndpointForm, EventsForm
from portal.webhooks.models import Endpoint

LOG_ROWS = 50


@never_cache
@tenant_page(Role.ADMIN)
def endpoint_list(request: HttpRequest) -> HttpResponse:
    tenant = request.tenant  # type: ignore[attr-defined]
    form = EndpointForm(request.POST or None)
    issued = None
    if request.method == "POST" and form.is_valid():
        try:
            issued = services.endpoint_create(actor=request.user, tenant=tenant,
                                              **form.cleaned_data)
        except ApplicationError as exc:
            apply_errors(form, exc)
        else:
            form = EndpointForm()
    return render(request, "webhooks/list.html", {
        "form": form, "issued": issued, "endpoints": selectors.endpoint_list(tenant=tenant),
    }, status=400 if form.errors else 200)


def _endpoint(request: HttpRequest, endpoint_id: Any) -> Endpoint:
    return selectors.endpoint_get(tenant=request.tenant,  # type: ignore[attr-defined]
                                  endpoint_id=endpoint_id)


def _detail(request: HttpRequest, endpoint: Endpoint, *, form: EventsForm | None = None,
            secret: str = "") -> HttpResponse:
    form = form or EventsForm(initial={"events": endpoint.events})
    log = selectors.message_list(endpoint=endpoint)[:LOG_ROWS]
    return render(request, "webhooks/detail.html", {
        "endpoint": endpoint, "form": form, "secret": secret, "log": log,
    }, status=400 if form.errors else 200)


@never_cache
@tenant_page(Role.ADMIN)
def endpoint_detail(request: HttpRequest, endpoint_id: Any) -> HttpResponse:
    endpoint = _endpoint(request, endpoint_id)
    if request.method != "POST":
        return _detail(request, endpoint)
    form = EventsForm(request.POST)
    if form.is_valid():
        try:
            endpoint = services.endpoint_update(actor=request.user, endpoint=endpoint,
                                                events=form.cleaned_data["events"])
        except ApplicationError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, _("Events saved."))
            return redirect("webhooks:detail", endpoint_id=endpoint.pk)
    return _detail(request, endpoint, form=form)


@require_POST
@tenant_page(Role.ADMIN)
def endpoint_enable(request: HttpRequest, endpoint_id: Any) -> HttpResponse:
    endpoint = _endpoint(request, endpoint_id)
    services.endpoint_update(actor=request.user, endpoint=endpoint,
                             enabled=request.POST.get("enabled") == "1")
    return redirect("webhooks:detail", endpoint_id=endpoint.pk)


@never_cache
@require_POST
@tenant_page(Role.ADMIN)
def endpoint_rotate(request: HttpRequest, endpoint_id: Any) -> HttpResponse:
    issued = services.endpoint_rotate_secret(actor=request.user,
                                             endpoint=_endpoint(request, endpoint_id))
    return _detail(request, issued.endpoint, secret=issued.secret)


@require_POST
@tenant_page(Role.ADMIN)
def endpoint_delete(request: HttpRequest, endpoint_id: Any) -> HttpResponse:
    endpoint = _endpoint(request, endpoint_id)
    services.endpoint_delete(actor=request.user, endpoint=endpoint)
    messages.success(request, _("Endpoint %(url)s deleted.") % {"url": endpoint.url})
    return redirect("webhooks:list")


@require_POST
@tenant_page(Role.ADMIN)
def message_resend(request: HttpRequest, message_id: Any) -> HttpResponse:
    message = selectors.message_get(tenant=request.tenant,  # type: ignore[attr-defined]
                                    message_id=message_id)
    try:
        services.message_resend(actor=request.user, message=message)
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, _("%(id)s will be sent again.") % {"id": message.msg_id})
    return redirect("webhooks:detail", endpoint_id=message.endpoint_id)
