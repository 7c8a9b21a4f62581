"""Finding 9 (CSP) in a real browser: the portal's pages work under their
Content-Security-Policy — no violation reported, htmx's live preview and the WebSocket
still run, and a member's removal asks through the ``data-confirm`` handler in app.js."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.browser.test_portal_e2e import sign_in

pytestmark = pytest.mark.browser


def _violations(page: Any) -> list[str]:
    seen: list[str] = []
    page.on("console", lambda m: seen.append(m.text) if "Content Security Policy" in m.text
            else None)
    return seen


def test_pages_run_under_their_csp(stack: str, page: Any) -> None:
    violations = _violations(page)
    sign_in(page, stack)
    for path in ("/", "/profile/", "/leases/", "/leases/calendar/", "/usage/",
                 "/tenant/members/", "/tenant/api-keys/", "/tenant/quotas/"):
        response = page.goto(f"{stack}{path}")
        assert response is not None and "script-src" in response.headers[
            "content-security-policy"], path
    # htmx (a static script) still drives the live quote
    page.goto(f"{stack}/order/")
    page.get_by_label("GPUs per node").fill("2")
    page.wait_for_function(
        "() => (document.querySelector('[data-testid=quote]')?.textContent || '').length > 0")
    # a confirmation without an inline handler: dismissing it keeps the member
    page.goto(f"{stack}/tenant/members/")
    asked: list[str] = []

    def dismiss(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", dismiss)
    rows = page.locator("form[data-confirm] button[type=submit]")
    assert rows.count() >= 1
    before = page.locator("tbody tr").count()
    rows.first.click()
    page.wait_for_timeout(300)
    assert asked and re.search("Remove this member", asked[0])
    assert page.locator("tbody tr").count() == before
    assert violations == []
