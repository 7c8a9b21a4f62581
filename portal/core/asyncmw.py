"""Middleware that runs in the caller's mode: sync under WSGI, async under ASGI.

A sync-only middleware in an ASGI stack makes Django hop to a thread around it on every
request; the agent API (async views, thousands of long-polls and reports) paid for that
three times per request. ``DualModeMiddleware`` is the one place that picks the mode.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponse


class DualModeMiddleware:
    """Subclasses implement ``before`` (returns state for ``after``) and ``after``."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def before(self, request: HttpRequest) -> Any:
        return None

    def after(self, request: HttpRequest, response: HttpResponse, state: Any) -> None:
        return None

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        state = self.before(request)
        try:
            response = self.get_response(request)
            self.after(request, response, state)
            return response
        finally:
            self.done(state)

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        state = self.before(request)
        try:
            call: Awaitable[HttpResponse] = self.get_response(request)
            response = await call
            self.after(request, response, state)
            return response
        finally:
            self.done(state)

    def done(self, state: Any) -> None:
        """Runs however the request ended (an exception included)."""
        return None
