"""The operators' console in headless Chromium against the demo: staff pages render (with
labelled controls), a quota change round-trips through the tenant page, and a tenant
user is kept out."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.browser.conftest import publish, shot
from tests.browser.test_portal_e2e import PASSWORD, unlabelled_controls

pytestmark = pytest.mark.browser

PAGES = [("console", "/console/"), ("console-fabric", "/console/fabric/"),
         ("console-queue", "/console/queue/"), ("console-partitions", "/console/partitions/"),
         ("console-tenants", "/console/tenants/"), ("console-tenant", "/console/tenants/acme/"),
         ("console-audit", "/console/audit/"), ("console-billing", "/console/billing/"),
         ("console-storage", "/console/storage/")]


def sign_in_as(page: Any, base: str, username: str) -> None:
    page.goto(f"{base}/accounts/login/")
    page.get_by_label(re.compile("Username|用户名")).fill(username)
    page.get_by_label(re.compile("Password|密码")).fill(PASSWORD)
    page.locator("main button[type=submit]").click()
    page.wait_for_load_state()


def test_staff_console_pages_and_a_quota_change(stack: str, page: Any) -> None:
    sign_in_as(page, stack, "operator")
    for name, path in PAGES:
        response = page.goto(stack + path)
        assert response is not None and response.status == 200, path
        assert page.locator("main h1").count() >= 1, path
        assert unlabelled_controls(page) == [], path
        shot(page, name)
    page.goto(stack + "/console/fabric/")
    assert page.locator("main svg").count() >= 1
    node = page.locator("main a[href*='/console/nodes/']").first
    node.click()
    page.wait_for_load_state()
    assert "/console/nodes/" in page.url and page.locator("main h1").count() >= 1
    assert unlabelled_controls(page) == [], page.url
    shot(page, "console-node")

    # the tenant page: set acme's tenant-wide max lease hours through the quota form
    page.goto(stack + "/console/tenants/acme/")
    form = page.locator("form", has=page.locator("[name=quota-max_lease_hours]"))
    form.locator("[name=quota-max_gpus]").fill("256")
    form.locator("[name=quota-max_lease_hours]").fill("72")
    form.locator("[name=quota-reason]").fill("browser test")
    form.locator("button[type=submit]").first.click()
    page.wait_for_load_state()
    assert "Quota saved." in page.inner_text("main")
    row = page.locator("main table tr", has_text="256")
    assert row.count() == 1 and " 72 " in f" {row.inner_text()} ".replace("\t", " ")
    shot(page, "console-tenant-saved")
    publish(["console-fabric", "console-tenant"])


def test_tenant_user_is_kept_out_of_the_console(stack: str, page: Any) -> None:
    sign_in_as(page, stack, "acme-member")
    response = page.goto(stack + "/console/")
    assert response is not None
    assert response.status in (403, 404) or "/accounts/login/" in page.url
