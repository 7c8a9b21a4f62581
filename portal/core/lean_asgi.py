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

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.core import signals
from django.core.exceptions import ImproperlyConfigured, MiddlewareNotUsed, RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.exception import convert_exception_to_response
from django.dispatch import Signal
from django.http import HttpRequest, HttpResponse
from django.middleware.common import CommonMiddleware
from django.middleware.security import SecurityMiddleware
from django.urls import set_script_prefix
from django.utils.deprecation import MiddlewareMixin
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

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Django 5.2's ``ASGIHandler.handle`` (body, script prefix, request, the
        disconnect watch, response, close) with ``request_started`` and the response's
        ``close`` (``request_finished``) run in the event loop instead of a thread hop
        each: their receivers (``close_old_connections``, ``reset_queries``,
        ``close_caches``, ``reset_urlconf``) only touch this thread's connections, and
        the agent API opens none here (its database work runs in ``dbthread``'s threads,
        which check their connections around every use). While a signal has an async
        receiver, Django's own ``handle`` runs instead."""
        if not (_loop_safe(signals.request_started) and _loop_safe(signals.request_finished)):
            await super().handle(scope, receive, send)
            return
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, error_response = self.create_request(scope, body_file)
        if request is None:
            body_file.close()
            await self.send_response(error_response, send)
            error_response.close()
            return

        async def process_request() -> HttpResponse:
            response: HttpResponse = await self.run_get_response(request)
            with contextlib.suppress(asyncio.CancelledError):  # client gone during send
                await self.send_response(response, send)
            return response

        listen = asyncio.create_task(self.listen_for_disconnect(receive))
        serve = asyncio.create_task(process_request())
        tasks = [listen, serve]  # cancelled in this order, as Django does
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            if task.done():
                try:
                    task.result()
                except RequestAborted:
                    pass
                except AssertionError:
                    body_file.close()
                    raise
            else:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        try:
            response = serve.result()
        except asyncio.CancelledError:
            signals.request_finished.send(sender=self.__class__)
        else:
            response.close()  # sends request_finished
        body_file.close()


def _loop_safe(signal: Signal) -> bool:
    """Every live receiver is sync (``send`` can call it in the event loop)."""
    return not signal._live_receivers(None)[1]  # (sync, async) receivers, Django >= 5.0


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


class InlineMiddleware:
    """A ``MiddlewareMixin`` middleware whose hooks are pure computation (no I/O), run in
    the event loop: Django's mixin hops to a thread for ``process_request`` and again for
    ``process_response`` on every async request. Subclasses name the ``mixin``."""

    mixin: type[MiddlewareMixin]
    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.inner = self.mixin(get_response)
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        return self.inner(request)

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        inner: Any = self.inner
        response = inner.process_request(request) if hasattr(inner, "process_request") \
            else None
        response = response or await self.get_response(request)
        if hasattr(inner, "process_response"):
            response = inner.process_response(request, response)
        return response  # type: ignore[no-any-return]


class InlineSecurityMiddleware(InlineMiddleware):
    """``SecurityMiddleware`` (HTTPS redirect, HSTS, nosniff, referrer and COOP headers)."""

    mixin = SecurityMiddleware


class InlineCommonMiddleware(InlineMiddleware):
    """``CommonMiddleware`` (``ALLOWED_HOSTS`` through ``get_host``, disallowed user
    agents, ``APPEND_SLASH``, ``Content-Length``)."""

    mixin = CommonMiddleware
