"""A lean Django ASGI handler for the agent API, picked by path prefix (ADR 0150).

Agent requests (node reports, long-polls, enrolment, credential rotation) carry a bearer
credential and JSON: they need no sessions, authentication middleware, CSRF, locale,
messages, htmx or static files. ``LeanASGIHandler`` is Django's own ASGI handler (signals,
URL resolution, the same views and exception handling) with its own middleware list
(``settings.AGENT_MIDDLEWARE``); ``PathPrefixDispatcher`` hands the requests under
``settings.AGENT_API_PREFIX`` to it and every other request to the full stack.

Every middleware of a lean list must be able to run async (no thread hop per request).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

from django.core.exceptions import ImproperlyConfigured, MiddlewareNotUsed
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.exception import convert_exception_to_response
from django.http import HttpRequest, HttpResponse
from django.utils.module_loading import import_string

from portal.core.asyncmw import DualModeMiddleware

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class LeanASGIHandler(ASGIHandler):
    """Django's ASGI handler running ``middleware`` (dotted paths) instead of
    ``settings.MIDDLEWARE``."""

    def __init__(self, middleware: Sequence[str]) -> None:
        self.middleware_paths = tuple(middleware)
        super().__init__()  # loads the middleware (async)

    def load_middleware(self, is_async: bool = False) -> None:
        """``BaseHandler.load_middleware`` for an async-only list: no adapter threads."""
        if not is_async:
            raise ImproperlyConfigured("LeanASGIHandler serves ASGI only")
        self._view_middleware: list[Any] = []
        self._template_response_middleware: list[Any] = []
        self._exception_middleware: list[Any] = []
        handler = convert_exception_to_response(self._get_response_async)
        for dotted in reversed(self.middleware_paths):
            factory = import_string(dotted)
            if not getattr(factory, "async_capable", False):
                raise ImproperlyConfigured(f"{dotted} cannot run async: a lean stack "
                                           "takes async-capable middleware only")
            try:
                instance = factory(handler)
            except MiddlewareNotUsed:
                continue
            if instance is None:
                raise ImproperlyConfigured(f"Middleware factory {dotted} returned None.")
            if hasattr(instance, "process_view"):
                self._view_middleware.insert(
                    0, self.adapt_method_mode(True, instance.process_view))
            if hasattr(instance, "process_template_response"):
                self._template_response_middleware.append(
                    self.adapt_method_mode(True, instance.process_template_response))
            if hasattr(instance, "process_exception"):  # Django runs these sync
                self._exception_middleware.append(
                    self.adapt_method_mode(False, instance.process_exception))
            handler = convert_exception_to_response(instance)
        self._middleware_chain = handler


class PathPrefixDispatcher:
    """HTTP requests whose path (below the ASGI ``root_path``) starts with one of
    ``routes``' prefixes go to that application, all others to ``default``."""

    def __init__(self, routes: Sequence[tuple[str, ASGIApp]], default: ASGIApp) -> None:
        self.routes = tuple(routes)
        self.default = default

    def app_for(self, scope: Scope) -> ASGIApp:
        path: str = scope.get("path", "")
        root: str = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root):]
        for prefix, app in self.routes:
            if path.startswith(prefix):
                return app
        return self.default

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app_for(scope)(scope, receive, send)


API_HEADERS = {
    # A JSON API response is never a document to render or frame.
    "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
}


class ApiHeadersMiddleware(DualModeMiddleware):
    """The browser stack's CSP and clickjacking headers, as fixed values for a JSON API
    (no per-request nonce: nothing is rendered)."""

    def after(self, request: HttpRequest, response: HttpResponse, state: Any) -> None:
        for name, value in API_HEADERS.items():
            if name not in response:
                response[name] = value
