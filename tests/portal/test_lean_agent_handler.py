"""The agent API runs in its own lean ASGI handler (ADR 0150): through the production
ASGI application (``portal.asgi.application``), agent requests touch no session, auth,
CSRF, locale or messages middleware and get no cookie, while a browser page keeps the
full stack (CSRF cookie, session, ``Vary: Cookie``).

Regression: every agent report paid for the whole browser middleware stack (≈ half of
the server CPU per report in ``make bench-ingest``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from asgiref.testing import ApplicationCommunicator
from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.middleware.csrf import CsrfViewMiddleware
from django.middleware.locale import LocaleMiddleware
from django.utils.module_loading import import_string

BROWSER_ONLY = {
    "session": (SessionMiddleware, "process_request"),
    "auth": (AuthenticationMiddleware, "process_request"),
    "csrf": (CsrfViewMiddleware, "process_view"),
    "locale": (LocaleMiddleware, "process_request"),
    "messages": (MessageMiddleware, "process_request"),
}


class Response:
    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        self.status, self.body = status, body
        self.headers: dict[str, list[str]] = {}
        for name, value in headers:
            self.headers.setdefault(name.decode().lower(), []).append(value.decode())

    def header(self, name: str) -> str:
        return ", ".join(self.headers.get(name.lower(), []))


def call(path: str, method: str = "GET", body: bytes = b"",
         headers: dict[str, str] | None = None) -> Response:
    from portal.asgi import application

    sent = {"host": "testserver", "cookie": "sessionid=stale; csrftoken=stale",
            **(headers or {})}
    raw = [(k.lower().encode(), v.encode()) for k, v in sent.items()]
    if body:
        raw += [(b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode())]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": method, "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": b"", "root_path": "", "headers": raw,
             "client": ("127.0.0.1", 40000), "server": ("testserver", 80)}

    async def run() -> Response:
        comm = ApplicationCommunicator(application, scope)
        await comm.send_input({"type": "http.request", "body": body, "more_body": False})
        start = await comm.receive_output(10)
        chunks = []
        while True:
            message = await comm.receive_output(10)
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        return Response(start["status"], start["headers"], b"".join(chunks))

    return asyncio.run(run())


@pytest.fixture
def touched() -> Iterator[dict[str, int]]:
    """How often each browser-only middleware hook ran."""
    counts = dict.fromkeys(BROWSER_ONLY, 0)
    patches = []
    for name, (cls, method) in BROWSER_ONLY.items():
        original = getattr(cls, method)

        def spy(self: Any, *args: Any, _n: str = name, _o: Any = original) -> Any:
            counts[_n] += 1
            return _o(self, *args)
        patches.append(mock.patch.object(cls, method, spy))
    for p in patches:
        p.start()
    yield counts
    for p in patches:
        p.stop()


@pytest.mark.parametrize("dotted", settings.AGENT_MIDDLEWARE)
def test_every_agent_middleware_can_run_async(dotted: str) -> None:
    assert getattr(import_string(dotted), "async_capable", False), f"{dotted} is sync-only"


def test_agent_api_paths_run_no_browser_middleware(touched: dict[str, int]) -> None:
    prefix = settings.AGENT_API_PREFIX
    unknown = call(f"{prefix}no-such-endpoint")
    report = call(f"{prefix}nodes/n-1/reports", "POST", b'{"protocol": 1}')
    assert touched == dict.fromkeys(BROWSER_ONLY, 0)
    assert unknown.status == 404 and json.loads(unknown.body)["error"]["code"] == "not_found"
    assert report.status == 401
    assert json.loads(report.body)["error"]["code"] == "unauthenticated"
    for response in (unknown, report):
        assert "set-cookie" not in response.headers
        assert "cookie" not in response.header("Vary").lower()
        assert "accept-language" not in response.header("Vary").lower()
        assert response.header("Content-Type") == "application/json"
        assert response.header("Content-Length") == str(len(response.body))
        assert response.header("X-Content-Type-Options") == "nosniff"
        assert "default-src 'none'" in response.header("Content-Security-Policy")


def test_agent_api_still_refuses_unknown_hosts() -> None:
    response = call(f"{settings.AGENT_API_PREFIX}no-such-endpoint",
                    headers={"host": "evil.example"})
    assert response.status == 400


def test_browser_pages_keep_the_full_stack(touched: dict[str, int]) -> None:
    response = call("/accounts/login/")
    assert response.status == 200
    assert touched["session"] == touched["csrf"] == touched["auth"] == 1
    assert touched["locale"] == touched["messages"] == 1
    assert any(c.startswith(f"{settings.CSRF_COOKIE_NAME}=")
               for c in response.headers.get("set-cookie", []))
    assert "cookie" in response.header("Vary").lower()
