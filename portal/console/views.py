"""Console pages (staff only). Views parse input and call services/selectors."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.paginator import Paginator
from django.forms import Form
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from portal.billing import selectors as billing
from portal.billing.api.views import stream
from portal.console import selectors, services
from portal.console.forms import (
    ContractForm,
    CreditForm,
    MemberInviteForm,
    MemberRoleForm,
    QuotaForm,
    StorageEndpointForm,
    role_prefix,
)
from portal.console.quotas import CONFIRM, quota_set
from portal.core.errors import ApplicationError
from portal.inventory import selectors as inventory
from portal.inventory import services as inventory_services
from portal.inventory.models import Gpu, Node, StorageEndpoint
from portal.inventory.services import node_set_state
from portal.leasing.models import Lease, Quota
from portal.tenants.models import Tenant
from portal.tenants.services import tenant_set_status
from portal.web.formerrors import apply_errors


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
def storage(request: HttpRequest) -> HttpResponse:
    """Storage ports per fabric: limited members of every tenant partition there."""
    which = request.POST.get("form") if request.method == "POST" else None
    form = StorageEndpointForm(request.POST if which == "add" else None)
    if which == "remove":
        pk = request.POST.get("endpoint", "")
        endpoint = get_object_or_404(StorageEndpoint, pk=int(pk) if pk.isdigit() else 0)
        _act(request, lambda: inventory_services.storage_endpoint_remove(
            actor=request.user, endpoint=endpoint), _("Storage port removed."))
        return redirect("console:storage")
    if which == "add" and form.is_valid():
        try:
            inventory_services.storage_endpoint_add(actor=request.user, **form.cleaned_data)
            messages.success(request, _("Storage port added."))
            return redirect("console:storage")
        except ApplicationError as exc:
            apply_errors(form, exc)
    return render(request, "console/storage.html", {
        "form": form, "rows": inventory.storage_endpoint_list()})


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


TENANT_FORMS = ("quota", "contract", "credit")


def _add_line(request: HttpRequest, obj: Tenant, which: str, form: Any) -> str | None:
    """Add a contract price or a credit line from a valid form; the success message, or
    None with the service's errors put on the form."""
    add, done = ((services.contract_add, _("Contract price added.")) if which == "contract"
                 else (services.credit_add, _("Credit line added.")))
    try:
        add(actor=request.user, tenant=obj, **form.values())
    except ApplicationError as exc:
        apply_errors(form, exc)
        return None
    return str(done)


@staff_only
def tenant(request: HttpRequest, slug: str) -> HttpResponse:
    """One tenant: quotas, budget, contracts, credits and invoices, with forms to change
    quotas and add contract prices and credits (each through an audited service)."""
    obj = get_object_or_404(Tenant, slug=slug)
    inventory = selectors.gpu_models()
    quota_models = sorted(set(inventory) | set(Quota.objects.filter(tenant=obj).exclude(
        gpu_model="").values_list("gpu_model", flat=True)))
    contract_models = selectors.price_models(inventory)
    which = request.POST.get("form") if request.method == "POST" else None
    data = request.POST if which in TENANT_FORMS else None
    quota_form = QuotaForm(data if which == "quota" else None, prefix="quota",
                           models=quota_models, initial=_quota_initial(request, obj))
    contract_form = ContractForm(data if which == "contract" else None, prefix="contract",
                                 models=contract_models)
    credit_form = CreditForm(data if which == "credit" else None, prefix="credit")
    confirm_quota = False
    if request.method == "POST":
        done = None
        if which == "quota" and quota_form.is_valid():
            try:
                change = quota_set(actor=request.user, tenant=obj, **quota_form.values())
                done = _("Quota saved.") if change.changes or change.created else \
                    _("Nothing changed.")
                for warning in change.warnings:
                    messages.warning(request, warning)
            except ApplicationError as exc:
                confirm_quota = exc.code == CONFIRM
                apply_errors(quota_form, exc)
        elif which in ("contract", "credit"):
            form = contract_form if which == "contract" else credit_form
            done = _add_line(request, obj, which, form) if form.is_valid() else None
        elif which not in TENANT_FORMS:
            messages.error(request, _("Unknown form."))
            return redirect("console:tenant", slug=slug)
        if done is not None:
            messages.success(request, done)
            return redirect("console:tenant", slug=slug)
    return tenant_page(request, obj, quota_form=quota_form, contract_form=contract_form,
                       credit_form=credit_form, confirm_quota=confirm_quota)


def tenant_page(request: HttpRequest, obj: Tenant, *, status: int = 200,
                **forms: Any) -> HttpResponse:
    """The tenant page; forms not given (a rejected one, with its errors) are blank."""
    members = selectors.tenant_members(obj)
    context = {
        "tenant": obj, **selectors.tenant_detail(obj), "confirm_quota": False,
        "credit_form": CreditForm(prefix="credit"),
        "invite_form": MemberInviteForm(prefix="invite"),
        "members": [{"member": m, "form": MemberRoleForm(prefix=role_prefix(m),
                                                         initial={"role": m.role})}
                    for m in members["members"]],
        "invitations": members["invitations"],
        **forms}
    if "quota_form" not in forms or "contract_form" not in forms:
        blank = _blank_money_forms(request, obj)
        context |= {k: v for k, v in blank.items() if k not in forms}
    return render(request, "console/tenant.html", context, status=status)


def _blank_money_forms(request: HttpRequest, obj: Tenant) -> dict[str, Form]:
    models = selectors.gpu_models()
    quota_models = sorted(set(models) | set(Quota.objects.filter(tenant=obj).exclude(
        gpu_model="").values_list("gpu_model", flat=True)))
    return {"quota_form": QuotaForm(prefix="quota", models=quota_models,
                                    initial=_quota_initial(request, obj)),
            "contract_form": ContractForm(prefix="contract",
                                          models=selectors.price_models(models))}


def _quota_initial(request: HttpRequest, tenant: Tenant) -> dict[str, Any]:
    """``?edit=<model>`` (empty: the tenant-wide row) fills the form from that row."""
    if "edit" not in request.GET:
        return {}
    model = request.GET["edit"]
    row = Quota.objects.filter(tenant=tenant, gpu_model=model).first()
    if row is None:
        return {"gpu_model": model}
    return {"gpu_model": row.gpu_model, "max_gpus": row.max_gpus,
            "guaranteed_gpus": row.guaranteed_gpus, "gpu_hour_budget": row.gpu_hour_budget,
            "max_lease_hours": row.max_lease_hours,
            "max_pending_orders": row.max_pending_orders, "allow_spot": row.allow_spot,
            "allow_borrowing": row.allow_borrowing}


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
