"""Assets a browser asks for by a fixed path (issue 13: the favicon was a 404 on every page)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect
from django.templatetags.static import static


def favicon(request: HttpRequest) -> HttpResponse:
    """``/favicon.ico`` (pages without ``<link rel=icon>``: admin, API docs) → the SVG."""
    return HttpResponsePermanentRedirect(static("web/favicon.svg"))
