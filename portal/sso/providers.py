"""The operator's OIDC providers (``GPUPOOL_OIDC_PROVIDERS``: JSON, inline or a file path)
and their discovery documents (fetched from ``<issuer>/.well-known/openid-configuration``,
cached)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
from django.conf import settings
from django.core.cache import cache

DISCOVERY_CACHE_S = 3600
REQUIRED = ("name", "issuer", "client_id")


class ProviderError(Exception):
    """A provider is unknown, misconfigured or unreachable (shown as a clear page)."""


class UnknownProvider(ProviderError):
    """No provider has that name: the sign-in URL is wrong (404), not the provider (502)."""


@dataclass(frozen=True)
class Provider:
    name: str
    issuer: str
    client_id: str
    client_secret: str = ""
    label: str = ""
    scopes: str = "openid email profile"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def source(self) -> str:
        return f"oidc:{self.issuer}"


def _raw_config() -> list[dict[str, Any]]:
    raw = getattr(settings, "GPUPOOL_OIDC_PROVIDERS", "") or ""
    if isinstance(raw, list):
        return raw
    text = raw.strip()
    if text and not text.startswith("["):
        text = Path(text).read_text(encoding="utf-8")
    return json.loads(text) if text else []


def providers() -> list[Provider]:
    out = []
    for item in _raw_config():
        missing = [k for k in REQUIRED if not item.get(k)]
        if missing:
            raise ProviderError(f"GPUPOOL_OIDC_PROVIDERS: {missing} missing in {item!r}")
        known = {k: item[k] for k in ("client_secret", "label", "scopes") if k in item}
        out.append(Provider(name=item["name"], issuer=item["issuer"].rstrip("/"),
                            client_id=item["client_id"], **known))
    return out


def provider_named(name: str) -> Provider:
    for p in providers():
        if p.name == name:
            return p
    raise UnknownProvider(f"No sign-in provider called {name!r}.")


def discovery(provider: Provider) -> dict[str, Any]:
    key = f"oidc-discovery:{provider.issuer}"
    doc = cache.get(key)
    if doc is None:
        url = f"{provider.issuer}/.well-known/openid-configuration"
        try:
            response = requests.get(url, timeout=10)
            response.raise_for_status()
            doc = response.json()
        except (requests.RequestException, ValueError) as exc:
            raise ProviderError(f"The sign-in provider could not be reached ({url}).") from exc
        if str(doc.get("issuer", "")).rstrip("/") != provider.issuer:
            raise ProviderError("The provider's discovery document names another issuer.")
        cache.set(key, doc, DISCOVERY_CACHE_S)
    return dict(doc)
