"""Who may read ``/metrics``: a bearer token (``GPUPOOL_METRICS_TOKEN``) or an address in
``GPUPOOL_METRICS_ALLOW``. Nothing configured: nobody. The series hold counts only, but
queue depths and fleet sizes are still the provider's business, never public."""

from __future__ import annotations

import hmac
import ipaddress
from functools import cache

from django.conf import settings
from django.http import HttpRequest

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@cache
def _networks(spec: str) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(part.strip(), strict=False)
                 for part in spec.split(",") if part.strip())


def _address_allowed(request: HttpRequest) -> bool:
    networks = _networks(str(getattr(settings, "GPUPOOL_METRICS_ALLOW", "")))
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(address in net for net in networks)


def verdict(request: HttpRequest) -> int:
    """200 (allowed), 401 (no credential) or 403 (a wrong one)."""
    token = str(getattr(settings, "GPUPOOL_METRICS_TOKEN", ""))
    header = request.META.get("HTTP_AUTHORIZATION", "")
    scheme, _, given = header.partition(" ")
    if token and scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(),
                                                                    token.encode()):
        return 200
    if _address_allowed(request):
        return 200
    return 403 if header else 401
