"""Outbound HTTP to tenants' receivers, guarded against server-side request forgery.

Outside ``GPUPOOL_WEBHOOKS_ALLOW_PRIVATE`` (off in production) a URL's host is resolved and
every address it resolves to must be public: no loopback, private, link-local, multicast,
reserved or unspecified address, IPv4 or IPv6 (an IPv4-mapped IPv6 address is judged as
its IPv4 address). The connection goes to the checked address (no second DNS look-up
between check and connect: no rebinding), with the Host header and TLS SNI/certificate
name kept. Redirects are followed by hand, at most ``MAX_REDIRECTS``, each one checked
the same way. Timeouts, and at most ``READ_CAP`` bytes of a response are read.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import httpx
from django.conf import settings
from django.utils.translation import gettext as _

MAX_REDIRECTS = 3
READ_CAP = 64 * 1024
EXCERPT = 500
REDIRECTS = {301, 302, 303, 307, 308}


class Refused(Exception):
    """The URL may not be called (scheme, host, or an address that is not public)."""


@dataclass(frozen=True)
class Target:
    url: str  # as the tenant wrote it
    scheme: str
    host: str
    port: int
    ip: str  # the checked address we connect to


@dataclass(frozen=True)
class Outcome:
    status: int | None
    excerpt: str = ""
    error: str = ""
    duration_ms: int = 0


def allow_private() -> bool:
    return bool(settings.GPUPOOL_WEBHOOKS_ALLOW_PRIVATE)


def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (tests patch this)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def is_public(ip: str) -> bool:
    addr: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(ip)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_global and not (addr.is_loopback or addr.is_private or addr.is_link_local
                                   or addr.is_multicast or addr.is_reserved
                                   or addr.is_unspecified)


def split_url(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise Refused(_("Only http and https URLs can receive webhooks."))
    if not parts.hostname:
        raise Refused(_("The URL has no host."))
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise Refused(_("The URL's port is not valid.")) from exc
    return parts.scheme, parts.hostname, port


def _addresses(host: str, port: int) -> list[str]:
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    try:
        found = resolve(host, port)
    except (OSError, UnicodeError) as exc:
        raise Refused(_("The host %(host)s does not resolve.") % {"host": host}) from exc
    if not found:
        raise Refused(_("The host %(host)s does not resolve.") % {"host": host})
    return found


def pin(url: str) -> Target:
    """Check ``url`` and choose the address to connect to (raises :class:`Refused`)."""
    scheme, host, port = split_url(url)
    addresses = _addresses(host, port)
    if not allow_private():
        for ip in addresses:
            if not is_public(ip):
                raise Refused(_("%(host)s resolves to %(ip)s, which is not a public address.")
                              % {"host": host, "ip": ip})
    return Target(url=url, scheme=scheme, host=host, port=port, ip=addresses[0])


def _pinned_url(target: Target) -> str:
    parts = urlsplit(target.url)
    ip = f"[{target.ip}]" if ":" in target.ip else target.ip
    query = f"?{parts.query}" if parts.query else ""
    return f"{target.scheme}://{ip}:{target.port}{parts.path or '/'}{query}"


def _host_header(target: Target) -> str:
    host = f"[{target.host}]" if ":" in target.host else target.host
    default = 443 if target.scheme == "https" else 80
    return host if target.port == default else f"{host}:{target.port}"


def _read_capped(response: httpx.Response) -> str:
    chunks, size = [], 0
    for chunk in response.iter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size >= READ_CAP:
            break
    return b"".join(chunks)[:READ_CAP].decode(errors="replace")[:EXCERPT]


def _post_once(target: Target, headers: dict[str, str],
               body: bytes) -> tuple[int, str, str | None]:
    extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
    timeout = httpx.Timeout(float(settings.GPUPOOL_WEBHOOKS_TIMEOUT_S))
    with httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False) as client, \
            client.stream("POST", _pinned_url(target), content=body,
                          headers={**headers, "host": _host_header(target)},
                          extensions=extensions) as response:
        return response.status_code, _read_capped(response), response.headers.get("location")


def post(url: str, *, headers: dict[str, str], body: bytes) -> Outcome:
    """POST ``body`` to ``url``: checked, pinned, redirects re-checked; never raises."""
    started = time.monotonic()

    def done(status: int | None, excerpt: str = "", error: str = "") -> Outcome:
        return Outcome(status=status, excerpt=excerpt, error=error[:300],
                       duration_ms=int((time.monotonic() - started) * 1000))
    status: int | None = None
    try:
        for _hop in range(MAX_REDIRECTS + 1):
            status, excerpt, location = _post_once(pin(url), headers, body)
            if status not in REDIRECTS or not location:
                return done(status, excerpt)
            url = urljoin(url, location)
        return done(status, "", _("More than %(n)s redirects.") % {"n": MAX_REDIRECTS})
    except Refused as exc:
        return done(status, "", _("Refused: %(why)s") % {"why": exc})
    except httpx.TimeoutException:
        return done(None, "", _("Timed out."))
    except httpx.HTTPError as exc:
        return done(None, "", f"{type(exc).__name__}: {exc}")
