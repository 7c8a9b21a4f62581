"""End to end in headless Chromium against the running stack with simulated agents."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest

from tests.browser.conftest import publish, shot

pytestmark = pytest.mark.browser
PASSWORD = "gpupool-demo"


def sign_in(page: Any, base: str, username: str = "acme-admin") -> None:
    page.goto(f"{base}/accounts/login/")
    page.get_by_label(re.compile("Username|用户名")).fill(username)
    page.get_by_label(re.compile("Password|密码")).fill(PASSWORD)
    page.locator("main button[type=submit]").click()
    page.wait_for_url(f"{base}/")


def _slow_rerenders(page: Any) -> None:
    """Re-renders of the lease page (htmx requests) take 1.5 s: two state changes 0.3 s
    apart (provisioning, then active on the convergence event) always meet a render in
    flight. The old page dropped the second one (htmx's default sync) and stayed on
    "provisioning" — seen in CI once activation became an event."""
    def slow(route: Any) -> None:
        if not route.request.headers.get("hx-request"):
            route.continue_()
            return
        rendered = route.fetch()  # rendered now, delivered late
        time.sleep(1.5)
        route.fulfill(response=rendered)

    page.route(re.compile(r"/leases/[0-9a-f-]{36}/$"), slow)


def test_order_watch_extend_release(stack: str, page: Any) -> None:
    sign_in(page, stack)
    _slow_rerenders(page)
    assert page.get_by_role("heading", name=re.compile("Dashboard")).is_visible()
    shot(page, "dashboard-empty")

    # order 8 GPUs with the live preview
    page.get_by_role("link", name="Order GPUs").first.click()
    page.get_by_label("A100").uncheck()
    page.get_by_label("H100").check()
    page.get_by_label("GPUs per node").fill("8")
    page.get_by_label("Duration (hours)").fill("3")
    page.get_by_label("Name", exact=True).fill("e2e-train")
    quote = page.locator("[data-testid=quote]")
    quote.wait_for()
    page.wait_for_function(
        "() => document.querySelector('[data-testid=quote]')?.textContent.includes('Fits your quota')")
    assert "Can start now" in quote.inner_text()
    shot(page, "order")
    # a double click is one order
    page.locator("#order-submit").dblclick()
    page.wait_for_url(re.compile(r"/leases/[0-9a-f-]{36}/$"))
    lease_url = page.url
    page.evaluate("window.__noReload = true")

    # the lease becomes active without reloading, and its charts move
    page.wait_for_selector("#lease-state [data-state=active]", timeout=60_000)
    page.wait_for_function("() => document.querySelectorAll('#gpu-charts .chart').length === 8",
                           timeout=45_000)
    page.wait_for_function(
        "() => [...document.querySelectorAll('#gpu-charts .chart')]"
        ".every(c => (c.getAttribute('data-samples') | 0) >= 3)", timeout=45_000)
    points = page.locator("#gpu-charts .chart polyline").first.get_attribute("points")
    assert points and len(points.split()) >= 2
    assert page.evaluate("window.__noReload") is True
    assert page.locator("#port-charts .chart").count() >= 1
    assert "P_Key" in page.inner_text("main")
    assert re.search(r"GPU-[0-9a-f-]+", page.inner_text("main"))
    shot(page, "lease-active")

    # extend
    old_end = page.inner_text("#lease-end")
    page.get_by_role("link", name="Extend").click()
    shot(page, "lease-extend")
    page.get_by_role("button", name="Confirm extension").click()
    page.wait_for_url(lease_url)
    assert "Lease extended." in page.inner_text("main")
    assert page.inner_text("#lease-end") != old_end

    # release (with confirmation) and watch it end without reloading
    page.get_by_role("link", name="Release now").click()
    page.get_by_role("button", name="Release now").click()
    assert "This field is required." in page.inner_text("main")  # not confirmed yet
    page.get_by_label("Yes, I am sure").check()
    page.get_by_role("button", name="Release now").click()
    page.wait_for_url(lease_url)
    page.evaluate("window.__noReload = true")
    page.wait_for_selector("#lease-state [data-state=ended]", timeout=60_000)
    assert page.evaluate("window.__noReload") is True
    assert "Ended" in page.inner_text("#lease-state")
    shot(page, "lease-ended")

    # exactly one order was placed by the double click
    page.goto(f"{stack}/leases/")
    assert page.locator("tbody tr", has_text="e2e-train").count() == 1
    shot(page, "leases")
    for name, path in [("calendar", "/leases/calendar/"), ("dashboard", "/"),
                       ("profile", "/profile/"), ("members", "/tenant/members/"),
                       ("api-keys", "/tenant/api-keys/"), ("quotas", "/tenant/quotas/"),
                       ("usage", "/usage/")]:
        page.goto(stack + path)
        assert page.locator("main h1").count() >= 1
        assert unlabelled_controls(page) == [], name
        shot(page, name)
    page.emulate_media(color_scheme="dark")
    page.goto(stack + "/")
    shot(page, "dashboard-dark")
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(stack + "/order/")
    shot(page, "order-phone")
    publish(["dashboard", "order", "lease-active", "leases", "calendar", "dashboard-dark"])


UNLABELLED_JS = """() => [...document.querySelectorAll('input, select, textarea')]
  .filter(el => el.type !== 'hidden' && !el.labels?.length && !el.getAttribute('aria-label'))
  .map(el => el.name || el.id)"""


def unlabelled_controls(page: Any) -> list[str]:
    """Every visible form control has a label (accessibility)."""
    return page.evaluate(UNLABELLED_JS)


ALLOWED_LATIN = {
    "gpupool", "GPU", "GPUs", "H100", "A100", "API", "SSH", "UTC", "P_Key", "InfiniBand", "HCA",
    "Acme", "acme", "admin", "member", "English", "Lotus", "Lab", "XID", "NVLink", "Gb",
    "ssh", "ed25519", "ECDSA", "RSA", "OpenSSH", "CI", "lease", "lotus", "operator", "example",
    "com", "ops", "demo", "train", "mlx", "sim", "docs", "Spot", "spot", "UUID",
    # the job environment a lease gives (shell text, not UI words): docs/tenant-guide.md
    "NCCL", "NCCL_IB_HCA", "NCCL_IB_PKEY", "UCX_NET_DEVICES", "UCX_IB_PKEY",
    "GPUPOOL_IB_PKEY", "GPUPOOL_IPOIB_IF", "IPoIB", "export",
}


def english_words(text: str) -> list[str]:
    # ids, GUIDs, currencies, and user-chosen names (lease names, hostnames, usernames)
    text = re.sub(r"\b[0-9a-f]{8}\b|\bGPU-[0-9a-f-]+|\b0x[0-9a-f]+\b|\b[A-Z]{3}\b"
                  r"|\b[a-z0-9_]+(?:[-.][a-z0-9_]+)+\b", " ", text)
    words = re.findall(r"[A-Za-z][A-Za-z_]{2,}", text)
    return sorted({w for w in words if w not in ALLOWED_LATIN
                   and not re.fullmatch(r"(h100|a100|lease)\w*", w)})


def test_pages_are_translated_to_simplified_chinese(stack: str, page: Any) -> None:
    page.goto(f"{stack}/accounts/login/")
    page.select_option("#lang-switch", "zh-hans")
    page.locator("#lang-switch ~ button").click()
    page.wait_for_load_state()
    assert page.locator("html").get_attribute("lang") == "zh-hans"
    assert english_words(page.inner_text("main")) == []
    sign_in(page, stack, "acme-member")
    problems = {}
    for name, path in [("dashboard", "/"), ("order", "/order/"), ("leases", "/leases/"),
                       ("calendar", "/leases/calendar/"), ("profile", "/profile/"),
                       ("members", "/tenant/members/"), ("api-keys", "/tenant/api-keys/"),
                       ("quotas", "/tenant/quotas/"), ("usage", "/usage/")]:
        page.goto(stack + path)
        text = page.inner_text("header") + "\n" + page.inner_text("main")
        leftover = english_words(text)
        if leftover:
            problems[path] = [re.search(rf".{{0,40}}\b{w}\b.{{0,40}}", text, re.S).group(0)
                              for w in leftover]
        if name in ("dashboard", "order", "leases"):
            shot(page, f"zh-{name}")
    page.goto(stack + "/leases/")
    links = page.locator("tbody a[href*='/leases/']")
    if links.count():  # the lease page too, when the English run left a lease behind
        links.first.click()
        page.wait_for_selector("#lease-state")
        leftover = english_words(page.inner_text("main"))
        if leftover:
            problems["lease"] = leftover
        shot(page, "zh-lease")
    assert problems == {}, json.dumps(problems, ensure_ascii=False)
    publish(["zh-dashboard", "zh-order"])
