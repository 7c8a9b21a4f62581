from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from portal.tenants.models import ApiKey
from portal.tenants.services import api_key_authenticate


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer gpk_<prefix>_<secret>``. ``request.auth`` is the ApiKey."""

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
        return key.user, key

    def authenticate_header(self, request: Any) -> str:
        return self.keyword


class ApiKeyScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "portal.tenants.authentication.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "gpupool API key"}
