"""Findings 5 and 10 (issue 13): every page's assets come from this server, and exist.

Old code: ``/api/docs/`` and ``/api/redoc/`` loaded Swagger UI and ReDoc ``@latest`` from a
CDN (and ReDoc its fonts from Google), so they were blank offline; no page declared a
favicon, so the browser's ``/favicon.ico`` was a 404 on every page.
"""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from tests.portal.factories import make_user
from tests.portal.web.conftest import active_lease, client_for

SKIP = ("accounts/logout/", "i18n/setlang/", "api/v1/", "api/agent/", "api/schema/",
        "billing/export/", "healthz", "favicon.ico")


class Assets(HTMLParser):
    """The URLs a browser fetches by itself while rendering: scripts, styles, icons, images."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag in ("script", "img", "iframe", "source") and a.get("src"):
            self.urls.append(str(a["src"]))
        if tag == "link" and a.get("href") and a.get("rel") != "alternate":
            self.urls.append(str(a["href"]))


def _pages(patterns: Any = None, prefix: str = "") -> list[str]:
    """Every GET route without arguments (the lease page is added by the test)."""
    out = []
    for entry in patterns if patterns is not None else get_resolver().url_patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            out += _pages(entry.url_patterns, route)
        elif isinstance(entry, URLPattern) and "<" not in route and not route.startswith(SKIP):
            out.append("/" + route.lstrip("^").rstrip("$"))
    return sorted(set(out))


def _assets(client: Client, url: str) -> list[str]:
    response = client.get(url)
    if response.status_code != 200 or "text/html" not in response.get("Content-Type", ""):
        return []
    parser = Assets()
    parser.feed(response.content.decode())
    return parser.urls


@pytest.fixture
def visitors(pool: dict[str, Any]) -> dict[str, Client]:
    return {"member": client_for(pool["alice"]), "admin": client_for(pool["adam"]),
            "staff": client_for(make_user("op", staff=True)), "anonymous": Client()}


def test_assets_every_page_loads_nothing_from_another_host(pool: dict[str, Any],
                                                          visitors: dict[str, Client]) -> None:
    lease = active_lease(pool)
    pages = [*_pages(), f"/leases/{lease.pk}/", "/api/docs/", "/api/redoc/"]
    assert "/console/" in pages and "/order/" in pages
    foreign = []
    for who, client in visitors.items():
        for page in pages:
            for url in _assets(client, page):
                if urlsplit(url).netloc:
                    foreign.append((who, page, url))
    assert foreign == []


@pytest.mark.parametrize("page", ["/api/docs/", "/api/redoc/"])
def test_assets_api_docs_are_served_from_installed_files(visitors: dict[str, Client],
                                                        page: str) -> None:
    urls = _assets(visitors["member"], page)
    assert any(u.endswith((".js",)) for u in urls), urls
    for url in urls:
        # installed files, or the split view's own init script (no inline script: CSP)
        assert url.startswith("/static/") or url == f"{page}?script=", url
        assert visitors["member"].get(url).status_code == 200, url


def test_assets_no_page_has_a_404_asset(pool: dict[str, Any],
                                        visitors: dict[str, Client]) -> None:
    missing = []
    for who, client in visitors.items():
        seen: set[str] = set()
        for page in _pages():
            for url in _assets(client, page):
                if url in seen or urlsplit(url).netloc:
                    continue
                seen.add(url)
                if client.get(url, follow=True).status_code != 200:
                    missing.append((who, page, url))
    assert missing == []


def test_assets_favicon_declared_and_served(visitors: dict[str, Client]) -> None:
    urls = _assets(visitors["member"], "/")
    assert any(u.endswith("favicon.svg") for u in urls)
    response = visitors["anonymous"].get("/favicon.ico", follow=True)
    assert response.status_code == 200
