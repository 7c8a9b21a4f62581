"""The order page: a form, a live quote (htmx) and an idempotent submit."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from portal.core.errors import ApplicationError
from portal.tenants.models import Role
from portal.web import panels
from portal.web.forms import OrderForm
from portal.web.views._common import apply_errors, tenant_page


def _models() -> list[str]:
    return [row["model"] for row in panels.free_by_model()]


def _form(request: HttpRequest) -> OrderForm:
    """The order form with the pool's models and MIG profiles (free instances now)."""
    from portal.leasing.selectors import mig_offer

    models = _models()
    return OrderForm(request.POST or None, model_choices=models,
                     mig_choices=mig_offer(models=models))


def _spec(form: OrderForm) -> Any:
    from portal.leasing.services import OrderSpec

    return OrderSpec(**form.spec_values())


def _quote(request: HttpRequest, form: OrderForm) -> Any:
    """The leasing app's quote for a valid form; field errors go onto the form."""
    from portal.leasing.quoting import order_quote

    try:
        return order_quote(actor=request.user, tenant=request.tenant,  # type: ignore[attr-defined]
                           spec=_spec(form))
    except ApplicationError as exc:
        apply_errors(form, exc)
        return None


@tenant_page(Role.MEMBER)
def order(request: HttpRequest) -> HttpResponse:
    form = _form(request)
    quote = None
    if request.method == "POST" and form.is_valid():
        if "preview" in request.POST:
            quote = _quote(request, form)
        else:
            lease = _submit(request, form)
            if lease is not None:
                return redirect("web:lease", lease_id=lease.pk)
    status = 400 if form.errors else 200
    return render(request, "web/order.html", {"form": form, "quote": quote}, status=status)


def _submit(request: HttpRequest, form: OrderForm) -> Any:
    """Place the order once per form render: the hidden key makes a double click one order."""
    from portal.leasing import idempotency
    from portal.leasing.models import Lease
    from portal.leasing.services import order_create, order_submit

    tenant = request.tenant  # type: ignore[attr-defined]
    spec = _spec(form)

    def create() -> tuple[int, dict[str, Any]]:
        lease = order_create(actor=request.user, tenant=tenant, spec=spec,
                             idempotency_key=form.cleaned_data["idempotency_key"])
        return 201, {"id": str(lease.pk)}

    def once() -> tuple[int, dict[str, Any]]:
        return idempotency.run(tenant=tenant, key=form.cleaned_data["idempotency_key"],
                               body={"web_order": form.spec_values()}, create=create)

    try:  # a refusal by policy is recorded as a REJECTED lease (order_submit)
        _status, body = order_submit(actor=request.user, tenant=tenant, spec=spec,
                                     create=once)
    except ApplicationError as exc:
        if "Idempotency-Key" in exc.fields:
            form.add_error(None, _("This form was already submitted with other values. "
                                   "Open the order page again to place a new order."))
        else:
            apply_errors(form, exc)
        return None
    lease = Lease.objects.get(pk=body["id"], tenant=tenant)
    messages.success(request, _("Order placed: %(name)s.") % {"name": str(lease)})
    return lease


@tenant_page(Role.MEMBER)
def order_preview(request: HttpRequest) -> HttpResponse:
    """The quote panel alone, for htmx as the form changes (POST: it carries the form)."""
    form = _form(request)
    quote = _quote(request, form) if request.method == "POST" and form.is_valid() else None
    status = 400 if form.errors else 200  # htmx swaps a 4xx too (htmx-config in base.html)
    return render(request, "web/_quote.html", {"form": form, "quote": quote}, status=status)
