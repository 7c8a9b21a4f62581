"""mozilla-django-oidc's backend, per provider (ADR 0221): the token exchange, the JWKS
signature check and userinfo are the library's; we add what it leaves out — ``iss`` and
``aud`` checked, ``exp``/``iat`` required — and key users on (issuer, ``sub``)."""

from __future__ import annotations

from typing import Any

import jwt
import requests
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings

from portal.sso import identities
from portal.sso.providers import Provider, discovery

LEEWAY_S = 60


class LoginRefused(Exception):
    """The provider's answer is not accepted; the message is shown to the person."""


class ProviderBackend(OIDCAuthenticationBackend):  # type: ignore[misc]
    """In AUTHENTICATION_BACKENDS for ``get_user`` only; ``authenticate`` without a
    provider (a password form) answers None."""

    def __init__(self, provider: Provider | None = None) -> None:
        self.UserModel = get_user_model()
        self.provider = provider
        if provider is None:
            return
        doc = discovery(provider)
        self._by_name = {
            "OIDC_OP_TOKEN_ENDPOINT": doc["token_endpoint"],
            "OIDC_OP_USER_ENDPOINT": doc.get("userinfo_endpoint", ""),
            "OIDC_OP_JWKS_ENDPOINT": doc["jwks_uri"],
            "OIDC_RP_CLIENT_ID": provider.client_id,
            "OIDC_RP_CLIENT_SECRET": provider.client_secret,
            "OIDC_RP_SIGN_ALGO": "RS256", "OIDC_USE_NONCE": True, "OIDC_TIMEOUT": 10,
            "OIDC_RP_SCOPES": provider.scopes, "OIDC_CREATE_USER": True,
        }
        super().__init__()

    def get_settings(self, attr: str, *args: Any) -> Any:  # type: ignore[override]
        if self.provider is not None and attr in self._by_name:
            return self._by_name[attr]
        return import_from_settings(attr, *args)

    def authenticate(self, request: Any, **kwargs: Any) -> Any:
        return None  # only ``login_with_code`` signs in through a provider

    def retrieve_matching_jwk(self, token: str) -> Any:
        """The JWKS key named by the token's ``kid``; a token without ``kid`` only where the
        provider publishes a single signing key."""
        header = jwt.get_unverified_header(token)
        if "kid" in header:
            return super().retrieve_matching_jwk(token)
        response = requests.get(self.OIDC_OP_JWKS_ENDPOINT, timeout=10)
        response.raise_for_status()
        keys = [k for k in response.json().get("keys", []) if k.get("use", "sig") == "sig"]
        if len(keys) != 1:
            raise LoginRefused("The sign-in token names no key (kid) and the provider "
                               "publishes several.")
        return jwt.PyJWK(keys[0])

    def _verify_jws(self, payload: str, key: Any) -> dict[str, Any]:
        assert self.provider is not None
        try:
            claims: dict[str, Any] = jwt.decode(
                payload, key, algorithms=["RS256"], audience=self.provider.client_id,
                issuer=self.provider.issuer, leeway=LEEWAY_S,
                options={"require": ["iss", "aud", "exp", "iat", "sub"]})
        except jwt.ExpiredSignatureError as exc:
            raise LoginRefused("The sign-in token has expired. Please sign in again.") from exc
        except jwt.InvalidAudienceError as exc:
            raise LoginRefused("The sign-in token was issued for another application.") from exc
        except jwt.InvalidIssuerError as exc:
            raise LoginRefused("The sign-in token comes from an unexpected issuer.") from exc
        except jwt.InvalidTokenError as exc:
            raise LoginRefused(f"The sign-in token is not valid ({exc}).") from exc
        return claims

    def login_with_code(self, request: Any, *, code: str, redirect_uri: str, nonce: str,
                        code_verifier: str) -> Any:
        self.request = request
        try:
            tokens = self.get_token({
                "client_id": self.OIDC_RP_CLIENT_ID, "client_secret": self.OIDC_RP_CLIENT_SECRET,
                "grant_type": "authorization_code", "code": code,
                "redirect_uri": redirect_uri, "code_verifier": code_verifier})
            payload = self.verify_token(tokens.get("id_token") or "", nonce=nonce)
        except LoginRefused:
            raise
        except SuspiciousOperation as exc:
            raise LoginRefused(f"The sign-in could not be verified ({exc}).") from exc
        except Exception as exc:  # the provider's HTTP answers: any failure is a refusal
            raise LoginRefused(f"The sign-in provider refused the code ({exc}).") from exc
        return self._user_for(tokens.get("access_token"), payload)

    def _user_for(self, access_token: str | None, id_claims: dict[str, Any]) -> Any:
        assert self.provider is not None
        claims = dict(id_claims)
        if access_token and self.OIDC_OP_USER_ENDPOINT:
            info = self.get_userinfo(access_token, None, id_claims)
            if info.get("sub") == id_claims["sub"]:
                claims.update({k: v for k, v in info.items() if k not in ("iss", "aud")})
        return identities.sign_in(provider=self.provider, claims=claims)
