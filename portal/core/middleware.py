from __future__ import annotations

from contextvars import Token

from django.http import HttpRequest

from portal.core import context
from portal.core.asyncmw import DualModeMiddleware


class RequestContextMiddleware(DualModeMiddleware):
    """Records the caller's address and agent so that services can audit without a request."""

    def before(self, request: HttpRequest) -> Token[context.RequestContext | None]:
        via = "api" if request.path.startswith("/api/") else (
            "admin" if request.path.startswith("/admin/") else "web")
        return context.set_current(context.RequestContext(
            ip=context.client_ip(request.META),
            user_agent=request.META.get("HTTP_USER_AGENT", "")[:300],
            via=via,
        ))

    def done(self, state: Token[context.RequestContext | None]) -> None:
        context.reset(state)
