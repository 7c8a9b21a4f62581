"""Rate limits (finding 9): DRF scoped throttles kept in the cache (Redis in production).

One class serves the API and the sign-in page. A request's scope is its view's
``throttle_scope`` or, for writes (POST/PUT/PATCH/DELETE), ``settings.GPUPOOL_THROTTLE_ROUTES``
keyed by URL name — so the order, quote and API-key endpoints are limited without their
views knowing. Rates are ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]`` (read per request, so
a settings change applies at once). The caller is counted by user when signed in, else by
address (``REMOTE_ADDR``, which the proxy must set, as for the audit log). Over the limit:
429 with ``Retry-After``.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.translation import gettext as _
from redis.exceptions import RedisError
from rest_framework.settings import api_settings
from rest_framework.throttling import ScopedRateThrottle

from portal.core import context

SAFE = {"GET", "HEAD", "OPTIONS"}
log = logging.getLogger(__name__)


def scope_of(request: Any, view: Any) -> str | None:
    scope = getattr(view, "throttle_scope", None)
    if scope:
        return str(scope)
    if request.method in SAFE:
        return None
    match = getattr(request, "resolver_match", None)
    name = getattr(match, "url_name", None)
    routes: dict[str, str] = getattr(settings, "GPUPOOL_THROTTLE_ROUTES", {})
    return routes.get(name) if name else None


class PortalThrottle(ScopedRateThrottle):
    def allow_request(self, request: Any, view: Any) -> bool:
        self.scope = scope_of(request, view)
        if not self.scope:
            return True
        self.rate = api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)
        self.num_requests, self.duration = self.parse_rate(self.rate)
        try:
            return bool(super(ScopedRateThrottle, self).allow_request(request, view))
        except (RedisError, OSError) as exc:  # Redis restarting: a limit, not a gate
            log.warning("rate limit %s skipped, cache unreachable: %s", self.scope, exc)
            return True

    def get_ident(self, request: Any) -> str:
        return context.client_ip(request.META) or "unknown"


class _Scoped:
    def __init__(self, scope: str) -> None:
        self.throttle_scope = scope


def throttled(scope: str) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """For plain Django views (the sign-in page): POSTs over the rate get a 429 page."""

    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method not in SAFE:
                throttle = PortalThrottle()
                if not throttle.allow_request(request, _Scoped(scope)):
                    return too_many(throttle.wait())
            return view(request, *args, **kwargs)

        return wrapper

    return decorate


def too_many(wait: float | None) -> HttpResponse:
    response = HttpResponse(_("Too many attempts. Wait a minute and try again."),
                            status=429, content_type="text/plain; charset=utf-8")
    if wait is not None:
        response["Retry-After"] = str(max(1, math.ceil(wait)))
    return response
