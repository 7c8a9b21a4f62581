"""Portal-side doctor checks: ``GET <portal>/healthz`` answers (TLS problems in words) and
the host's clock agrees with the portal's ``Date`` header (leases end on the portal's clock;
a skewed node ends them early or late)."""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime

import httpx

from agents.doctor.findings import Finding, fail, ok, warn

SKEW_WARN_S = 2.0
SKEW_FAIL_S = 30.0
NTP_FIX = "synchronise the clock (`timedatectl set-ntp true`, chrony or systemd-timesyncd)"


def _tls_problem(exc: BaseException) -> str | None:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return seen.verify_message or str(seen)
        if isinstance(seen, ssl.SSLError):
            return str(seen)
        seen = seen.__cause__ or seen.__context__
    text = str(exc)
    return text if "CERTIFICATE_VERIFY_FAILED" in text or "SSL" in text else None


def _connect_failure(url: str, exc: httpx.HTTPError) -> Finding:
    tls = _tls_problem(exc)
    if tls is not None:
        return fail("portal", f"TLS to {url} failed: {tls}",
                    "set portal.ca_file to the CA bundle that signed the portal's certificate "
                    "(and check the host name in portal.url matches the certificate)")
    if isinstance(exc, httpx.TimeoutException):
        return fail("portal", f"{url} did not answer in time ({exc.__class__.__name__})",
                    "check the firewall and the portal's load balancer")
    return fail("portal", f"cannot reach {url}: {exc}",
                "check portal.url, DNS and the firewall; is the portal running?")


def check_skew(date_header: str | None, local_now: float) -> Finding:
    if not date_header:
        return warn("clock", "the portal sent no Date header: clock skew not checked", NTP_FIX)
    try:
        portal_now = parsedate_to_datetime(date_header).timestamp()
    except (TypeError, ValueError):
        return warn("clock", f"unreadable Date header {date_header!r}", NTP_FIX)
    skew = local_now - portal_now
    side = "ahead of" if skew > 0 else "behind"
    text = f"this host's clock is {abs(skew):.1f} s {side} the portal"
    if abs(skew) > SKEW_FAIL_S:
        return fail("clock", text, NTP_FIX)
    if abs(skew) > SKEW_WARN_S:
        return warn("clock", text, NTP_FIX)
    return ok("clock", f"clock within {SKEW_WARN_S:.0f} s of the portal ({skew:+.1f} s)")


def check_portal(url: str, *, ca_file: str = "", timeout_s: float = 10.0,
                 now: Callable[[], float] | None = None) -> list[Finding]:  # fmt: skip
    if not url:
        return [fail("portal", "portal.url is not set",
                     "set portal.url (or GPUPOOL_AGENT_PORTAL_URL) to the portal's address")]
    clock = now or time.time
    health = url.rstrip("/") + "/healthz"
    started = clock()
    try:
        response = httpx.get(health, timeout=timeout_s, verify=ca_file or True)
    except httpx.HTTPError as exc:
        return [_connect_failure(health, exc)]
    local = (started + clock()) / 2  # the Date header was stamped between the two
    found = [check_skew(response.headers.get("date"), local)]
    if response.status_code != 200:
        found.insert(0, fail("portal", f"{health} answered HTTP {response.status_code}",
                             "the portal is up but unhealthy: check its logs and database"))
    else:
        found.insert(0, ok("portal", f"{health} answered 200"))
    return found
