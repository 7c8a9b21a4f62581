"""Issue 13 in a real Chromium against ``manage.py demo``, offline: every page a newcomer
opens loads its assets from the portal itself, none is missing (favicon included), the API
docs render without a CDN, and an operator lands on the console.

Old code: Swagger UI and ReDoc came from cdn.jsdelivr.net (blank offline), ReDoc's fonts
from Google, ``/favicon.ico`` was a 404 on every page, and the operator landed on "You
belong to no tenant yet" with no link to ``/console/``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.browser.conftest import shot
from tests.browser.test_console import sign_in_as

pytestmark = pytest.mark.browser

TENANT_PAGES = ["/", "/order/", "/leases/", "/leases/calendar/", "/profile/", "/usage/",
                "/tenant/members/", "/tenant/api-keys/", "/tenant/quotas/"]


class Watch:
    """Requests to other hosts are refused (offline) and noted; failed responses noted."""

    def __init__(self, page: Any, base: str) -> None:
        self.host = urlsplit(base).netloc
        self.foreign: list[str] = []
        self.failed: list[str] = []
        page.context.route("**/*", self._route)
        page.on("response", self._response)

    def _route(self, route: Any) -> None:
        url = route.request.url
        if urlsplit(url).netloc != self.host and not url.startswith("data:"):
            self.foreign.append(url)
            route.abort()
        else:
            route.continue_()

    def _response(self, response: Any) -> None:
        if response.status >= 400:
            self.failed.append(f"{response.status} {response.url}")


def test_newcomer_pages_load_only_local_assets_and_none_is_missing(stack: str,
                                                                   page: Any) -> None:
    watch = Watch(page, stack)
    sign_in_as(page, stack, "acme-admin")
    for path in TENANT_PAGES:
        page.goto(stack + path)
        page.wait_for_load_state("networkidle")
    favicon = page.request.get(stack + "/favicon.ico")
    assert favicon.ok and "svg" in favicon.headers["content-type"]
    assert watch.foreign == [] and watch.failed == []


def test_newcomer_api_docs_render_offline(stack: str, page: Any) -> None:
    watch = Watch(page, stack)
    page.goto(stack + "/api/docs/")
    page.wait_for_selector(".swagger-ui .info .title", timeout=30_000)
    assert "gpupool API" in page.inner_text(".swagger-ui .info .title")
    shot(page, "api-docs-offline")
    page.goto(stack + "/api/redoc/")
    page.wait_for_selector("redoc h1, #redoc-container h1, .api-content h1", timeout=30_000)
    assert watch.foreign == [] and watch.failed == []


def test_newcomer_operator_lands_on_the_console(stack: str, page: Any) -> None:
    sign_in_as(page, stack, "operator")
    page.goto(stack + "/")
    page.wait_for_load_state()
    assert urlsplit(page.url).path == "/console/"
    assert "You belong to no tenant yet" not in page.inner_text("main")
    link = page.locator("header [data-testid=console-link]")
    assert link.count() == 1 and link.get_attribute("href") == "/console/"


def test_newcomer_far_start_date_is_explained_in_the_live_preview(stack: str,
                                                                  page: Any) -> None:
    """9999-12-31 was a 500 (OverflowError) behind the preview; now a 400 whose fragment
    htmx swaps in (htmx-config responseHandling), naming the limit."""
    sign_in_as(page, stack, "acme-member")
    page.goto(stack + "/order/")
    page.locator("[data-testid=quote]").wait_for()
    page.get_by_label("At a chosen time").check()
    page.get_by_label("Start at (UTC)").fill("9999-12-31T00:00")
    page.get_by_label("Start at (UTC)").dispatch_event("change")
    page.wait_for_function(
        "() => document.querySelector('#quote').textContent.includes('days ahead')")
    assert "at most 90 days ahead" in page.inner_text("#quote")
    shot(page, "order-far-start")
