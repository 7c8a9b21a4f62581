"""Content-Security-Policy on every response (finding 9).

Scripts run only from this origin or with the per-request nonce that templates read as
``{{ request.csp_nonce }}``; no inline event handlers (``on*=``) and no ``eval``. The
policy is ``settings.GPUPOOL_CSP`` (directive → sources; ``'nonce'`` stands for this
request's nonce); ``settings.GPUPOOL_CSP_EXTRA`` adds sources for path prefixes (the
third-party API docs pages load their bundles from a CDN). A response that already
carries the header (a view that set its own) is left alone.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from portal.core.asyncmw import DualModeMiddleware

HEADER = "Content-Security-Policy"
NONCE = "'nonce'"

Policy = Mapping[str, Sequence[str]]


def build_policy(base: Policy, extra: Mapping[str, Policy], path: str, nonce: str) -> str:
    """The header value for ``path``: ``base`` plus every ``extra`` whose prefix matches."""
    merged: dict[str, list[str]] = {k: list(v) for k, v in base.items()}
    for prefix, more in extra.items():
        if path.startswith(prefix):
            for directive, sources in more.items():
                merged.setdefault(directive, []).extend(
                    s for s in sources if s not in merged.get(directive, []))
    parts = []
    for directive, sources in merged.items():
        values = [f"'nonce-{nonce}'" if s == NONCE else s for s in sources]
        parts.append(" ".join([directive, *values]).strip())
    return "; ".join(parts)


class ContentSecurityPolicyMiddleware(DualModeMiddleware):
    def before(self, request: HttpRequest) -> str:
        nonce = secrets.token_urlsafe(16)
        request.csp_nonce = nonce  # type: ignore[attr-defined]
        return nonce

    def after(self, request: HttpRequest, response: HttpResponse, state: str) -> None:
        if HEADER not in response:
            response[HEADER] = build_policy(settings.GPUPOOL_CSP,
                                            getattr(settings, "GPUPOOL_CSP_EXTRA", {}),
                                            request.path, state)
