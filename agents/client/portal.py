"""HTTP client for the portal's agent API (httpx; the transport is injectable).

It honours the portal's answers that say when to come back (``backoff.HoldOff``): after a
``Retry-After`` (429, 503, 409 ``pending_approval``) or a refusal (4xx other than 400) it
makes no request until the hold ends and raises the same error at once instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from agents import protocol
from agents.client.backoff import HoldOff

# One report connection reused between reports (§1 connections): httpx's default
# keepalive_expiry (5 s) closed it before every 10 s report.
KEEP_ALIVE = httpx.Limits(max_connections=100, max_keepalive_connections=20,
                          keepalive_expiry=protocol.CLIENT_KEEP_ALIVE_S)


class PortalError(Exception):
    """The portal answered with an error body (4xx/5xx) or could not be reached.
    ``retry_after``: seconds from the ``Retry-After`` header (or the hold left)."""

    def __init__(self, status: int | None, code: str, message: str,
                 retry_after: float | None = None) -> None:  # fmt: skip
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message = status, code, message
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        """Worth retrying at the normal (5xx) pace: no answer, 5xx, 408, 429."""
        return self.status is None or self.status >= 500 or self.status in (408, 429)

    @property
    def refused(self) -> bool:
        """The portal refused the request itself (4xx other than 408/429): retrying the
        same request soon would be refused again."""
        return self.status is not None and 400 <= self.status < 500 and not self.retryable


@dataclass
class Credential:
    node_id: str
    credential: str


class PortalClient:
    def __init__(self, base_url: str, credential: Credential | None = None,
                 transport: httpx.BaseTransport | None = None, timeout_s: float = 10.0,
                 verify: bool | str = True, hold: HoldOff | None = None) -> None:  # fmt: skip
        self.credential = credential
        self.hold = hold or HoldOff()
        self.advice = protocol.IntervalAdvice(None, None)  # the portal's last word on them
        self.http = httpx.Client(
            base_url=base_url.rstrip("/"), transport=transport, timeout=timeout_s, verify=verify,
            limits=KEEP_ALIVE,
        )

    def close(self) -> None:
        self.http.close()

    def _headers(self, urgent: bool = False) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.credential is not None:
            headers[protocol.AUTH_HEADER] = f"Bearer {self.credential.credential}"
        if urgent:
            headers[protocol.PRIORITY_HEADER] = protocol.URGENT_PRIORITY
        return headers

    def _call(
        self, method: str, path: str, body: Any = None,
        params: dict[str, Any] | None = None, timeout: float | None = None,
        urgent: bool = False,
    ) -> httpx.Response:  # fmt: skip
        if (left := self.hold.remaining()) > 0:
            status, code = self.hold.reason
            raise PortalError(status, code, f"holding off {left:.0f} s after the portal's "
                              "last answer", retry_after=left)
        content = None if body is None else json.dumps(body, separators=(",", ":"))
        try:
            resp = self.http.request(
                method, path, content=content, params=params, headers=self._headers(urgent),
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )  # fmt: skip
        except httpx.HTTPError as exc:
            raise PortalError(None, "unreachable", str(exc) or type(exc).__name__) from exc
        if resp.status_code >= 400:
            err = _error(resp)
            self.hold.after_error(err.status, err.code, err.retry_after)
            raise err
        self.hold.ok()
        return resp

    def enrol(self, request: protocol.EnrolRequest) -> Credential:
        data = self._call("POST", protocol.ENROL_PATH, request).json()
        self.credential = Credential(node_id=data["node_id"], credential=data["credential"])
        self._follow(data)
        return self.credential

    def send_report(self, report: dict[str, Any], urgent: bool = False) -> dict[str, Any]:
        """POST one report; ``urgent``: it carries news a lease waits for (§5, Priority)."""
        path = protocol.REPORTS_PATH.format(node_id=self._node_id())
        ack: dict[str, Any] = self._call("POST", path, report, urgent=urgent).json()
        self._follow(ack)
        return ack

    def _follow(self, answer: Any) -> None:
        """Keep the intervals an answer carries (each one only where it says it)."""
        if not isinstance(answer, dict):
            return
        said = protocol.interval_advice(answer)
        self.advice = protocol.IntervalAdvice(said.heartbeat_s or self.advice.heartbeat_s,
                                              said.long_poll_s or self.advice.long_poll_s)

    def desired_state(self, after_generation: int, wait_s: int = 0) -> dict[str, Any] | None:
        """The desired state if its generation > ``after_generation``; None on 204."""
        path = protocol.DESIRED_STATE_PATH.format(node_id=self._node_id())
        params = {"after_generation": after_generation, "wait": wait_s}
        resp = self._call("GET", path, params=params, timeout=wait_s + 10.0)
        if resp.status_code == 204:
            return None
        body: dict[str, Any] = resp.json()
        return body

    def rotate_credential(self) -> Credential:
        path = protocol.CREDENTIAL_PATH.format(node_id=self._node_id())
        data = self._call("POST", path, {"protocol": protocol.PROTOCOL_VERSION}).json()
        self.credential = Credential(node_id=self._node_id(), credential=data["credential"])
        return self.credential

    def _node_id(self) -> str:
        if self.credential is None:
            raise PortalError(None, "not_enrolled", "no credential yet")
        return self.credential.node_id


def _error(resp: httpx.Response) -> PortalError:
    retry_after = retry_after_s(resp.headers.get("Retry-After"))
    try:
        err = resp.json()["error"]
        return PortalError(resp.status_code, str(err["code"]), str(err.get("message", "")),
                           retry_after)
    except (ValueError, KeyError, TypeError):
        return PortalError(resp.status_code, "http_error", resp.text[:200], retry_after)


def retry_after_s(value: str | None, now: datetime | None = None) -> float | None:
    """``Retry-After`` as seconds (RFC 9110: delay-seconds or an HTTP-date), or None."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
