"""Members of one tenant in the console (issue 13): invite, change a role, remove, and
withdraw an invitation. Each goes through the tenants services, which audit it and keep
the last-admin and last-owner rules; a refusal re-renders the tenant page with a 4xx."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from portal.console.forms import MemberInviteForm, MemberRoleForm, role_prefix
from portal.console.views import staff_only, tenant_page
from portal.core.errors import ApplicationError
from portal.tenants import invitations, services
from portal.tenants.models import Invitation, Membership, Tenant
from portal.web.invites import invite_from_form


def _back(tenant: Tenant) -> HttpResponse:
    return redirect(reverse("console:tenant", args=[tenant.slug]) + "#members")


def _refused(request: HttpRequest, tenant: Tenant, exc: ApplicationError) -> HttpResponse:
    messages.error(request, exc.message)
    return tenant_page(request, tenant, status=exc.status_code)


@staff_only
@require_POST
def member_invite(request: HttpRequest, slug: str) -> HttpResponse:
    tenant = get_object_or_404(Tenant, slug=slug)
    form = MemberInviteForm(request.POST, prefix="invite")
    if form.is_valid() and invite_from_form(request, tenant, form):
        return _back(tenant)
    return tenant_page(request, tenant, invite_form=form, status=400)


@staff_only
@require_POST
def member_role(request: HttpRequest, slug: str, member_id: UUID) -> HttpResponse:
    tenant = get_object_or_404(Tenant, slug=slug)
    member = get_object_or_404(Membership.objects.select_related("user"), tenant=tenant,
                               pk=member_id)
    form = MemberRoleForm(request.POST, prefix=role_prefix(member))
    if not form.is_valid():
        messages.error(request, _("Role: choose a valid role."))
        return tenant_page(request, tenant, status=400)
    try:
        services.membership_change_role(actor=request.user, member=member,
                                        role=form.cleaned_data["role"])
    except ApplicationError as exc:
        return _refused(request, tenant, exc)
    messages.success(request, _("Role of %(user)s changed.")
                     % {"user": member.user.get_username()})
    return _back(tenant)


@staff_only
@require_POST
def member_remove(request: HttpRequest, slug: str, member_id: UUID) -> HttpResponse:
    tenant = get_object_or_404(Tenant, slug=slug)
    member = get_object_or_404(Membership.objects.select_related("user"), tenant=tenant,
                               pk=member_id)
    try:
        services.membership_remove(actor=request.user, member=member)
    except ApplicationError as exc:
        return _refused(request, tenant, exc)
    messages.success(request, _("%(user)s was removed from the tenant.")
                     % {"user": member.user.get_username()})
    return _back(tenant)


@staff_only
@require_POST
def invitation_revoke(request: HttpRequest, slug: str, invitation_id: UUID) -> HttpResponse:
    tenant = get_object_or_404(Tenant, slug=slug)
    found: Any = get_object_or_404(Invitation, tenant=tenant, pk=invitation_id)
    invitations.invitation_revoke(actor=request.user, invitation=found)
    messages.success(request, _("Invitation to %(email)s withdrawn.") % {"email": found.email})
    return _back(tenant)
