"""HTTP client for the portal's agent API (httpx; the transport is injectable)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

from agents import protocol


class PortalError(Exception):
    """The portal answered with an error body (4xx/5xx) or could not be reached."""

    def __init__(self, status: int | None, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message = status, code, message

    @property
    def retryable(self) -> bool:
        return self.status is None or self.status >= 500 or self.status in (408, 429)


@dataclass
class Credential:
    node_id: str
    credential: str


class PortalClient:
    def __init__(self, base_url: str, credential: Credential | None = None,
                 transport: httpx.BaseTransport | None = None, timeout_s: float = 10.0,
                 verify: bool | str = True) -> None:  # fmt: skip
        self.credential = credential
        self.http = httpx.Client(
            base_url=base_url.rstrip("/"), transport=transport, timeout=timeout_s, verify=verify
        )

    def close(self) -> None:
        self.http.close()

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.credential is not None:
            headers[protocol.AUTH_HEADER] = f"Bearer {self.credential.credential}"
        return headers

    def _call(
        self, method: str, path: str, body: Any = None,
        params: dict[str, Any] | None = None, timeout: float | None = None,
    ) -> httpx.Response:  # fmt: skip
        content = None if body is None else json.dumps(body, separators=(",", ":"))
        try:
            resp = self.http.request(
                method, path, content=content, params=params, headers=self._headers(),
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )  # fmt: skip
        except httpx.HTTPError as exc:
            raise PortalError(None, "unreachable", str(exc) or type(exc).__name__) from exc
        if resp.status_code >= 400:
            raise _error(resp)
        return resp

    def enrol(self, request: protocol.EnrolRequest) -> Credential:
        data = self._call("POST", protocol.ENROL_PATH, request).json()
        self.credential = Credential(node_id=data["node_id"], credential=data["credential"])
        return self.credential

    def send_report(self, report: dict[str, Any]) -> dict[str, Any]:
        path = protocol.REPORTS_PATH.format(node_id=self._node_id())
        ack: dict[str, Any] = self._call("POST", path, report).json()
        return ack

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
    try:
        err = resp.json()["error"]
        return PortalError(resp.status_code, str(err["code"]), str(err.get("message", "")))
    except (ValueError, KeyError, TypeError):
        return PortalError(resp.status_code, "http_error", resp.text[:200])
