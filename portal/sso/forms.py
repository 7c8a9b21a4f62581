"""The password sign-in form, refusing members of a tenant whose passwords are off."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.forms import AuthenticationForm
from django.utils.translation import gettext_lazy as _

from portal.sso.providers import ProviderError, providers
from portal.tenants.models import Tenant


def password_off_tenants(user: Any) -> list[Tenant]:
    if user.is_staff:
        return []
    return list(Tenant.objects.filter(memberships__user=user, allow_password_login=False))


class PasswordLoginForm(AuthenticationForm):
    error_messages = {
        **AuthenticationForm.error_messages,
        "password_off": _("Passwords are turned off for %(tenants)s: sign in with single "
                          "sign-on instead."),
    }

    def confirm_login_allowed(self, user: Any) -> None:
        super().confirm_login_allowed(user)
        off = password_off_tenants(user)
        if off:
            raise forms.ValidationError(
                self.error_messages["password_off"], code="password_off",
                params={"tenants": ", ".join(t.name for t in off)})


def sign_in_providers() -> list[dict[str, str]]:
    """For the sign-in page: one button per configured provider."""
    try:
        return [{"name": p.name, "label": p.label or p.name} for p in providers()]
    except (ProviderError, ValueError, OSError):
        return []
