"""Console pages (staff only). Views parse input and call services/selectors."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from portal.billing import selectors as billing
from portal.billing.api.views import stream
from portal.console import selectors, services
from portal.core.errors import ApplicationError
from portal.inventory.models import Gpu, Node
from portal.inventory.services import node_set_state
from portal.leasing.models import Lease, Quota
from portal.tenants.models import Tenant
from portal.tenants.services import tenant_set_status


def staff_only(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Anonymous → login redirect; signed-in non-staff → 403."""
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not request.user.is_staff:
            raise DjangoPermissionDenied
        return view(request, *args, **kwargs)
    return wrapped


def _act(request: HttpRequest, fn: Callable[[], Any], ok: str) -> None:
    try:
        fn()
        messages.success(request, ok)
    except ApplicationError as exc:
        messages.error(request, exc.message)


@staff_only
def index(request: HttpRequest) -> HttpResponse:
    return render(request, "console/index.html", {})


@staff_only
def fabric(request: HttpRequest) -> HttpResponse:
    return render(request, "console/fabric.html", {"map": selectors.fabric_map()})


@staff_only
def node(request: HttpRequest, hostname: str) -> HttpResponse:
    obj = get_object_or_404(Node.objects.select_related("leaf", "fabric"), hostname=hostname)
    target = request.POST.get("state") or request.GET.get("state", "")
    if request.method == "POST" and request.POST.get("confirm") == "yes":
        _act(request, lambda: node_set_state(actor=request.user, node=obj, state=target,
                                             reason=request.POST.get("reason", "")),
             _("Node state changed."))
        return redirect("console:node", hostname=hostname)
    return render(request, "console/node.html", {
        "node": obj, "gpus": obj.gpus.order_by("index"), "confirm_state": target,
        "states": Node.State.choices, "affected": selectors.affected_leases(obj),
        "agent": getattr(obj, "agent", None), "observed": getattr(obj, "observed", None),
        "ports": obj.hca_ports.select_related("switch")})


@staff_only
@require_POST
def gpu_health(request: HttpRequest, pk: int) -> HttpResponse:
    gpu = get_object_or_404(Gpu.objects.select_related("node"), pk=pk)
    health = "quarantined" if request.POST.get("action") == "quarantine" else "healthy"
    _act(request, lambda: services.gpu_set_health(actor=request.user, gpu=gpu, health=health,
                                                  reason=request.POST.get("reason", "")),
         _("GPU updated."))
    return redirect("console:node", hostname=gpu.node.hostname)


@staff_only
def queue(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        lease = get_object_or_404(Lease, pk=request.POST.get("lease"))
        try:
            boost = int(request.POST.get("boost", "0"))
        except ValueError:
            boost = 10**6
        _act(request, lambda: services.lease_set_queue_boost(
            actor=request.user, lease=lease, boost=boost, reason=request.POST.get("reason", "")),
            _("Priority changed."))
        return redirect("console:queue")
    return render(request, "console/queue.html", {"leases": selectors.queue()[:500]})


@staff_only
def partitions(request: HttpRequest) -> HttpResponse:
    return render(request, "console/partitions.html", {"rows": selectors.partitions()})


@staff_only
def tenants(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        tenant = get_object_or_404(Tenant, slug=request.POST.get("tenant"))
        status = "suspended" if request.POST.get("action") == "suspend" else "active"
        _act(request, lambda: tenant_set_status(actor=request.user, tenant=tenant, status=status,
                                                reason=request.POST.get("reason", "")),
             _("Tenant status changed."))
        return redirect("console:tenants")
    month = billing.current_month()
    rows = [{"tenant": t, "quotas": Quota.objects.filter(tenant=t),
             "budget": billing.budget_usage(tenant=t, month=month),
             "contracts": t.contracts.all()} for t in Tenant.objects.order_by("name")[:200]]
    return render(request, "console/tenants.html", {"rows": rows, "month": month})


@staff_only
def audit(request: HttpRequest) -> HttpResponse:
    filters = {k: request.GET.get(k, "") for k in ("action", "actor", "tenant", "object_type")}
    page = Paginator(selectors.audit_entries(**filters), 50).get_page(request.GET.get("page"))
    return render(request, "console/audit.html", {"page": page, "filters": filters})


@staff_only
def billing_page(request: HttpRequest) -> HttpResponse:
    if fmt := request.GET.get("type"):
        slug = request.GET.get("tenant")
        tenant = get_object_or_404(Tenant, slug=slug) if slug else None
        try:
            return stream(request, fmt, tenant)
        except ApplicationError as exc:
            messages.error(request, exc.message)
    return render(request, "console/billing.html", {
        "tenants": Tenant.objects.order_by("name"),
        "invoices": billing.invoices(tenant=None)[:100],
        "showback": billing.showback(tenant=None, limit=50)})
