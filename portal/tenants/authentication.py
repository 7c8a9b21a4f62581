from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions

from portal.tenants.models import ApiKey
from portal.tenants.principal import bind_key, of_request
from portal.tenants.services import api_key_authenticate


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer gpk_<prefix>_<secret>``. ``request.auth`` is the ApiKey.

    The user returned carries the key's principal (``principal.bind_key``): every access
    check that later receives this user acts for the key's tenant only.
    """

    keyword = "Bearer"

    def authenticate(self, request: Any) -> tuple[Any, ApiKey] | None:
        header = authentication.get_authorization_header(request).decode(errors="replace")
        if not header.startswith(self.keyword + " "):
            return None
        raw = header[len(self.keyword) + 1:].strip()
        if not raw.startswith("gpk_"):
            return None
        key = api_key_authenticate(raw)
        if key is None or not key.user.is_active:
            raise exceptions.AuthenticationFailed(_("Invalid, expired or revoked API key."))
        bind_key(key.user, key)
        return key.user, key

    def authenticate_header(self, request: Any) -> str:
        return self.keyword


class IsPlatformStaff(permissions.BasePermission):
    """DRF's ``IsAdminUser``, but through the gate: a staff key bound to a tenant acts for
    that tenant only, so it has no platform-wide staff powers."""

    def has_permission(self, request: Any, view: Any) -> bool:
        return of_request(request).platform_staff


class ApiKeyScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "portal.tenants.authentication.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "gpupool API key"}
