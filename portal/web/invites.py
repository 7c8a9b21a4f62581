"""Inviting someone from a form (the tenant's members page and the operators' console):
the tenants service decides; this shows its answer."""

from __future__ import annotations

from django.contrib import messages
from django.forms import Form
from django.http import HttpRequest
from django.utils.translation import gettext as _

from portal.core.errors import ApplicationError
from portal.tenants import invitations
from portal.tenants.models import Tenant
from portal.web.formerrors import apply_errors


def invite_from_form(request: HttpRequest, tenant: Tenant, form: Form) -> bool:
    """Send the invitation a valid ``form`` (email, role) names; True once sent (and said),
    False with the service's refusal on the form."""
    try:
        issued = invitations.invitation_create(
            actor=request.user, tenant=tenant, email=form.cleaned_data["email"],
            role=form.cleaned_data["role"], base_url=request.build_absolute_uri("/"))
    except ApplicationError as exc:
        apply_errors(form, exc)
        return False
    messages.success(request, _("An invitation was sent to %(email)s.")
                     % {"email": issued.invitation.email})
    return True
