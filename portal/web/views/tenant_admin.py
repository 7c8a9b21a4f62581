"""Tenant admin: members and roles, API keys (secret shown once), quotas; usage nav."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from portal.core.errors import ApplicationError
from portal.leasing.quotas import member_gpus
from portal.tenants import invitations, services
from portal.tenants.access import require_role
from portal.tenants.models import Membership, Role
from portal.tenants.selectors import api_key_list, invitation_list, membership_list
from portal.web import panels
from portal.web.forms import ApiKeyForm, InviteForm, MemberLimitForm, RoleForm
from portal.web.invites import invite_from_form
from portal.web.views._common import apply_errors, can, tenant_page
from portal.web.views.dashboard import quota_rows


def _flatten(exc: ApplicationError) -> str:
    return " ".join(m for msgs in exc.fields.values() for m in msgs) or exc.message


def _member(request: HttpRequest, member_id: Any) -> Membership:
    member = (membership_list(user=request.user, tenant=request.tenant)  # type: ignore[attr-defined]
              .filter(pk=member_id).first())
    if member is None:
        raise Http404
    return member


def _members_page(request: HttpRequest, form: InviteForm,
                  limit_form: MemberLimitForm | None = None,
                  limit_member: Any = None) -> HttpResponse:
    """The members table (role, personal GPU limit and use) and the invite form.

    ``limit_form`` is a rejected limit form, shown with its errors in ``limit_member``'s row.
    """
    tenant = request.tenant  # type: ignore[attr-defined]
    members = list(membership_list(user=request.user, tenant=tenant).order_by("user__username"))
    use = member_gpus(tenant, [m.user_id for m in members])
    rows = []
    for m in members:
        bad = limit_form is not None and m.pk == limit_member
        rows.append({
            "m": m, "form": RoleForm(initial={"role": m.role}, prefix=str(m.pk)),
            "limit_form": limit_form if bad else MemberLimitForm(
                initial={"max_gpus": m.max_gpus}, prefix=f"limit-{m.pk}"),
            "in_use": use.get(m.user_id, 0),
        })
    failed = bool(form.errors) or (limit_form is not None and bool(limit_form.errors))
    may_admin = can(request, Role.ADMIN)
    return render(request, "web/members.html", {
        "form": form, "rows": rows, "may_admin": may_admin,
        "invitations": invitation_list(user=request.user, tenant=tenant) if may_admin else [],
    }, status=400 if failed else 200)


@tenant_page()
def members(request: HttpRequest) -> HttpResponse:
    """GET: members and open invitations. POST (admins): invite an address — the answer
    is the same whether or not someone has an account with it."""
    tenant = request.tenant  # type: ignore[attr-defined]
    form = InviteForm(request.POST or None)
    if request.method == "POST":
        require_role(request.user, tenant, Role.ADMIN)
        if form.is_valid() and invite_from_form(request, tenant, form):
            return redirect("web:members")
    return _members_page(request, form)


@require_POST
@tenant_page(Role.ADMIN)
def invitation_revoke(request: HttpRequest, invitation_id: Any) -> HttpResponse:
    tenant = request.tenant  # type: ignore[attr-defined]
    found = invitation_list(user=request.user, tenant=tenant).filter(pk=invitation_id).first()
    if found is None:
        raise Http404
    invitations.invitation_revoke(actor=request.user, invitation=found)
    messages.success(request, _("Invitation to %(email)s withdrawn.") % {"email": found.email})
    return redirect("web:members")


@require_POST
@tenant_page(Role.ADMIN)
def member_role(request: HttpRequest, member_id: Any) -> HttpResponse:
    member = _member(request, member_id)
    form = RoleForm(request.POST, prefix=str(member.pk))
    if form.is_valid():
        try:
            services.membership_change_role(actor=request.user, member=member,
                                            role=form.cleaned_data["role"])
        except ApplicationError as exc:
            messages.error(request, _flatten(exc))
        else:
            messages.success(request, _("Role changed."))
    else:
        messages.error(request, _("Choose a valid role."))
    return redirect("web:members")


@require_POST
@tenant_page(Role.ADMIN)
def member_limit(request: HttpRequest, member_id: Any) -> HttpResponse:
    """Set or clear (empty field) a member's personal GPU limit; errors shown in the row."""
    member = _member(request, member_id)
    form = MemberLimitForm(request.POST, prefix=f"limit-{member.pk}")
    if form.is_valid():
        try:
            services.membership_set_limit(actor=request.user, membership=member,
                                          max_gpus=form.cleaned_data["max_gpus"])
        except ApplicationError as exc:
            apply_errors(form, exc)
        else:
            user = member.user.get_username()
            if form.cleaned_data["max_gpus"] is None:
                messages.success(request, _("%(user)s has no personal GPU limit now.")
                                 % {"user": user})
            else:
                messages.success(request, _("%(user)s may now hold up to %(limit)s GPUs.")
                                 % {"user": user, "limit": form.cleaned_data["max_gpus"]})
            return redirect("web:members")
    return _members_page(request, InviteForm(), form, member.pk)


@require_POST
@tenant_page(Role.ADMIN)
def member_remove(request: HttpRequest, member_id: Any) -> HttpResponse:
    member = _member(request, member_id)
    try:
        services.membership_remove(actor=request.user, member=member)
    except ApplicationError as exc:
        messages.error(request, _flatten(exc))
    else:
        messages.success(request, _("Member removed."))
    return redirect("web:members")


def _keys(request: HttpRequest) -> Any:
    return api_key_list(user=request.user).filter(tenant=request.tenant)  # type: ignore[attr-defined]


@never_cache
@tenant_page()
def api_keys(request: HttpRequest) -> HttpResponse:
    form = ApiKeyForm(request.POST or None)
    issued = None
    if request.method == "POST" and form.is_valid():
        try:
            issued = services.api_key_create(actor=request.user, name=form.cleaned_data["name"],
                                             tenant=request.tenant,  # type: ignore[attr-defined]
                                             expires_at=form.cleaned_data["expires_at"])
        except ApplicationError as exc:
            apply_errors(form, exc)
        else:
            form = ApiKeyForm()
    return render(request, "web/api_keys.html", {
        "form": form, "issued": issued, "keys": _keys(request),
    }, status=400 if form.errors else 200)


@require_POST
@tenant_page()
def api_key_revoke(request: HttpRequest, key_id: Any) -> HttpResponse:
    key = _keys(request).filter(pk=key_id).first()
    if key is None:
        raise Http404
    services.api_key_revoke(actor=request.user, key=key)
    messages.success(request, _("Key %(prefix)s revoked.") % {"prefix": key.prefix})
    return redirect("web:api_keys")


@tenant_page()
def quotas(request: HttpRequest) -> HttpResponse:
    return render(request, "web/quotas.html", {"quotas": quota_rows(request.tenant)})  # type: ignore[attr-defined]


@tenant_page()
def usage(request: HttpRequest) -> HttpResponse:
    from portal.billing.statements import recent_invoices

    tenant = request.tenant  # type: ignore[attr-defined]
    admin = can(request, Role.ADMIN)
    return render(request, "web/usage.html", {
        "spend": panels.spend(tenant), "quotas": quota_rows(tenant), "billing_admin": admin,
        "invoices": recent_invoices(tenant=tenant) if admin else [],
        "exports": panels.export_links() if admin else [],
    })
