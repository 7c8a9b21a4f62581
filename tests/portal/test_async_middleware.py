"""The middleware stack runs in the server's mode: no sync-only middleware makes every
ASGI request (the agent API's reports and long-polls above all) hop threads.

Regression: CSP, WhiteNoise and the request-context middleware were sync-only."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.test import AsyncClient
from django.urls import path
from django.utils.module_loading import import_string

from portal.core import context
from portal.core.csp import HEADER

seen: dict[str, Any] = {}


async def probe(request: HttpRequest) -> HttpResponse:
    seen["context"] = context.current()
    seen["nonce"] = getattr(request, "csp_nonce", None)
    return HttpResponse("ok")


urlpatterns = [path("probe/", probe)]


@pytest.mark.parametrize("dotted", settings.MIDDLEWARE)
def test_every_middleware_can_run_async(dotted: str) -> None:
    cls = import_string(dotted)
    assert getattr(cls, "async_capable", False), f"{dotted} is sync-only"


def test_async_stack_sets_the_request_context_and_csp(settings: Any) -> None:
    settings.ROOT_URLCONF = __name__
    response = asyncio.run(AsyncClient().get("/probe/", headers={"User-Agent": "probe-agent"}))
    assert response.status_code == 200
    assert seen["context"].user_agent == "probe-agent"
    assert seen["nonce"] and f"'nonce-{seen['nonce']}'" in response[HEADER]
    assert context.current() is not seen["context"]  # reset once the request is over


def test_async_stack_still_serves_static_files() -> None:
    async def fetch() -> tuple[int, bytes]:
        response = await AsyncClient().get("/static/web/app.css")
        return response.status_code, response.getvalue()

    status, body = asyncio.run(fetch())
    assert status == 200 and b"{" in body
