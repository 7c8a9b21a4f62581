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
         headers: dict[str, str] | None = None, query: str = "") -> Response:
    from portal.asgi import application

    sent = {"host": "testserver", "cookie": "sessionid=stale; csrftoken=stale",
            **(headers or {})}
    raw = [(k.lower().encode(), v.encode()) for k, v in sent.items()]
    if body:
        raw += [(b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode())]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": method, "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": query.encode(), "root_path": "", "headers": raw,
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


@pytest.mark.services("postgres")
@pytest.mark.django_db(transaction=True)  # the agent API's own database threads
def test_the_protocol_through_the_lean_handler(touched: dict[str, int]) -> None:
    from portal.fleet.models import AgentReport
    from portal.fleet.services.enrolment import bootstrap_token_create
    from tests.portal.fleet.helpers import report, sample

    prefix = settings.AGENT_API_PREFIX
    token = bootstrap_token_create(actor=None, role="node", hostname="lean-01")[1]
    enrol = call(f"{prefix}enrol", "POST", json.dumps({
        "protocol": 1, "bootstrap_token": token, "role": "node", "hostname": "lean-01",
        "agent_version": "0.1.0", "inventory": {}}).encode())
    assert enrol.status == 201, enrol.body
    node_id, credential = json.loads(enrol.body)["node_id"], json.loads(enrol.body)["credential"]
    auth = {"authorization": f"Bearer {credential}"}
    path = f"{prefix}nodes/{node_id}/reports"

    bad = report(node_id, 1, [sample(1_764_000_000.0)])
    bad["telemetry"][0]["gpus"][0]["index"] = "zero"
    refused = call(path, "POST", json.dumps(bad).encode(), auth)
    assert refused.status == 400
    error = json.loads(refused.body)["error"]
    assert error["code"] == "invalid_report"
    assert error["details"][0]["field"] == "telemetry[0].gpus[0].index"
    assert not AgentReport.objects.exists()  # a refused report changes nothing

    ok = call(path, "POST", json.dumps(report(node_id, 1, [sample(1_764_000_000.0)])).encode(),
              auth)
    assert ok.status == 200, ok.body
    assert json.loads(ok.body)["status"] == "accepted"
    assert AgentReport.objects.filter(agent__agent_id=node_id, seq=1).exists()
    desired = call(f"{prefix}nodes/{node_id}/desired-state", headers=auth,
                   query="after_generation=-1&wait=0")
    assert desired.status in (200, 204), desired.body  # 204: nothing desired yet
    assert touched == dict.fromkeys(BROWSER_ONLY, 0)
    assert all("set-cookie" not in r.headers for r in (enrol, refused, ok, desired))


class SyncOnly:
    sync_capable, async_capable = True, False

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response


def test_a_lean_stack_refuses_sync_only_middleware() -> None:
    from django.core.exceptions import ImproperlyConfigured

    from portal.core.lean_asgi import LeanASGIHandler

    with pytest.raises(ImproperlyConfigured, match="cannot run async"):
        LeanASGIHandler([f"{__name__}.SyncOnly"])
