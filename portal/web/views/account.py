"""Profile (SSH keys), accepting invitations and the tenant switcher."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from portal.core.errors import ApplicationError
from portal.tenants import access, invitations, services
from portal.tenants.access import ROLE_LABELS
from portal.tenants.models import Role, SshPublicKey
from portal.tenants.selectors import invitation_by_token, memberships_of
from portal.web.forms import SshKeyForm, TenantSwitchForm
from portal.web.views._common import apply_errors, translate_errors


@login_required
@translate_errors
def profile(request: HttpRequest) -> HttpResponse:
    form = SshKeyForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            key = services.ssh_key_add(actor=request.user, name=form.cleaned_data["name"],
                                       public_key=form.cleaned_data["public_key"])
        except ApplicationError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, _("Key %(name)s added (%(fp)s).")
                             % {"name": key.name, "fp": key.fingerprint})
            return redirect("web:profile")
    keys = SshPublicKey.objects.filter(user=request.user).order_by("name")
    return render(request, "web/profile.html", {
        "form": form, "keys": keys, "memberships": memberships_of(user=request.user),
    }, status=400 if form.errors else 200)


@require_POST
@login_required
@translate_errors
def ssh_key_delete(request: HttpRequest, key_id: str) -> HttpResponse:
    services.ssh_key_delete(actor=request.user, key_id=key_id)
    messages.success(request, _("Key removed."))
    return redirect("web:profile")


@require_POST
@login_required
@translate_errors
def tenant_switch(request: HttpRequest) -> HttpResponse:
    form = TenantSwitchForm(request.POST)
    target = request.POST.get("next") or "/"
    if not url_has_allowed_host_and_scheme(target, {request.get_host()},
                                           require_https=request.is_secure()):
        target = "/"
    if form.is_valid():
        tenant = access.tenants_for(request.user).filter(slug=form.cleaned_data["tenant"]).first()
        if tenant is not None:
            request.session[access.SESSION_KEY] = tenant.slug
            messages.info(request, _("Now working in %(tenant)s.") % {"tenant": tenant.name})
            return redirect(target)
    messages.error(request, _("You are not a member of that tenant."))
    return redirect(target)


def set_language(request: HttpRequest) -> HttpResponse:
    """Django's language switch (cookie for this browser), plus, for a signed-in user, the
    remembered choice that the e-mails they receive follow."""
    from django.views.i18n import set_language as switch

    from portal.tenants.services import preference_set_language

    response = switch(request)
    if request.method == "POST" and request.user.is_authenticated:
        preference_set_language(user=request.user, language=request.POST.get("language", ""))
    return response


@login_required
@translate_errors
def invitation(request: HttpRequest, token: str) -> HttpResponse:
    """GET: what the invitation offers. POST: accept it; the tenant you work in stays."""
    found = invitation_by_token(token)
    if request.method == "POST":
        member = invitations.accept_keeping_active_tenant(request, token)
        messages.success(request, _("You joined %(tenant)s as %(role)s. Switch to it from the "
                                    "tenant menu when you want to work there.")
                         % {"tenant": member.tenant.name,
                            "role": str(ROLE_LABELS[Role(member.role)]).lower()})
        return redirect("web:profile")
    return render(request, "web/invitation.html", {"invitation": found},
                  status=200 if found is not None else 404)
