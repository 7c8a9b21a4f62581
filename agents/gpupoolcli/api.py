"""The public REST API (``/api/v1/``) over httpx; every failure becomes a ``CliError`` in
the server's words (its error body: ``{"error", "detail", "fields"}``) with an exit code."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx

from agents.gpupoolcli.errors import CliError, Exit, exit_for_status
from agents.gpupoolcli.i18n import _, language

API_PREFIX = "/api/v1"
TIMEOUT = httpx.Timeout(30.0, connect=10.0)
USER_AGENT = "gpupool-cli/1"


def _server_error(response: httpx.Response) -> CliError:
    """The server's message and field errors; a body that is not ours gets the status."""
    code = exit_for_status(response.status_code)
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("detail"):
        fields = body.get("fields") if isinstance(body.get("fields"), dict) else {}
        return CliError(str(body["detail"]), code, fields=fields)
    return CliError(_("The server answered {status}.").format(status=response.status_code),
                    code)


class Api:
    """One portal, one API key; ``transport`` is injectable for tests."""

    def __init__(self, url: str, api_key: str, *,
                 transport: httpx.BaseTransport | None = None) -> None:
        if not url:
            raise CliError(_("No portal URL: run 'gpupool login' or set GPUPOOL_URL."),
                           Exit.AUTH)
        if not api_key:
            raise CliError(_("No API key: run 'gpupool login' or set GPUPOOL_API_KEY."),
                           Exit.AUTH)
        self.base = url.rstrip("/")
        self.client = httpx.Client(
            base_url=self.base + API_PREFIX, timeout=TIMEOUT, transport=transport,
            headers={"Authorization": f"Bearer {api_key}", "User-Agent": USER_AGENT,
                     "Accept-Language": language(), "Accept": "application/json"})

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self.client.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise CliError(_("Cannot reach {url}: {why}").format(url=self.base, why=exc),
                           Exit.NETWORK) from exc
        if response.status_code >= 400:
            raise _server_error(response)
        return response

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params or None).json()

    def post(self, path: str, body: dict[str, Any], *,
             headers: dict[str, str] | None = None) -> Any:
        return self.request("POST", path, json=body, headers=headers).json()

    def pages(self, path: str, **params: Any) -> Iterator[dict[str, Any]]:
        """Every row of a paginated list (``{"results": [...], "next": url}``)."""
        page = 1
        while True:
            body = self.get(path, **params, page=page)
            if isinstance(body, list):
                yield from body
                return
            yield from body.get("results", [])
            if not body.get("next"):
                return
            page += 1

    def download(self, path: str, **params: Any) -> httpx.Response:
        return self.request("GET", path, params=params or None,
                            headers={"Accept": "*/*"})

    def close(self) -> None:
        self.client.close()
