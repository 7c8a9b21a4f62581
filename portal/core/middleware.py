from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from portal.core import context


class RequestContextMiddleware:
    """Records the caller's address and agent so that services can audit without a request."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        via = "api" if request.path.startswith("/api/") else (
            "admin" if request.path.startswith("/admin/") else "web")
        token = context.set_current(context.RequestContext(
            ip=context.client_ip(request.META),
            user_agent=request.META.get("HTTP_USER_AGENT", "")[:300],
            via=via,
        ))
        try:
            return self.get_response(request)
        finally:
            context.reset(token)
