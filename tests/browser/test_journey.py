"""Issue 13's journey in a real Chromium against ``manage.py demo`` (simulated agents).

English: the operator reaches the console from the header, uses every console page (the
fabric map measured readable, a quota raised, a member invited, re-roled and the
invitation withdrawn); a tenant admin orders → active → extend → release; a waiting order
shows its reason, earliest start and queue position; a reservation reads "Scheduled" and
is cancelled; the admin opens the invoice, downloads its CSV and each usage export.
Then the same pages in zh-hans (chosen with the language switcher), failing on English UI
words and raw codes. Screenshots land in artifacts/screenshots/ (published to
docs/screenshots/ with GPUPOOL_PUBLISH_SCREENSHOTS=1).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.browser.conftest import ARTIFACTS, publish, shot
from tests.browser.readable import unreadable
from tests.browser.test_console import sign_in_as
from tests.browser.test_portal_e2e import english_words, unlabelled_controls

pytestmark = pytest.mark.browser

CONSOLE_PAGES = ["/console/", "/console/fabric/", "/console/queue/", "/console/partitions/",
                 "/console/storage/", "/console/tenants/", "/console/tenants/acme/",
                 "/console/audit/", "/console/billing/", "/console/enrolments/",
                 "/console/nodes/h100-0001/"]
TENANT_PAGES = ["/", "/order/", "/leases/", "/leases/calendar/", "/usage/", "/profile/",
                "/tenant/members/", "/tenant/api-keys/", "/tenant/quotas/"]
# Words and codes that must not be left in a zh-hans page (UI words, state and reason codes)
FORBIDDEN = ["insufficient_capacity", "fragmentation", "not_yet", "expiry_warning",
             "on_demand", "Queued", "Scheduled", "Requested", "Provisioning", "Active",
             "Ended", "Cancelled", "Extend", "Release", "Cancel", "Invoice", "Waiting",
             "Queue position", "Earliest start", "Members", "Role", "Remove", "Invite",
             "Fabric map", "Quotas", "Budget", "Audit", "Billing", "Storage", "Tenants",
             "Partitions", "Enrolments", "Console", "Dashboard", "Order GPUs", "Usage",
             "Download", "Save", "Submit", "Change", "Withdraw", "Yes", "No leaf switch"]
# names of formats and standards, shown as they are in every language
# "Webhook": the Standard Webhooks term, kept as is in Chinese product UIs (as the
# zh-hans pages write it: "Webhook 端点")
PROPER_NOUNS = {"FOCUS", "FinOps", "JSON", "JSONL", "Webhook"}
# the console shows data as it is: switch names ("demo-fabric leaf 001"), port rates
# ("400 Gb/sec"), tool names; the audit log's recorded changes are data too (its page is
# checked for the FORBIDDEN words only)
CONSOLE_TERMS = PROPER_NOUNS | {"P_KEY", "GUID", "ibnetdiscover", "leaf", "spine", "sec",
                                "notebook"}  # the demo's fractional lease, by name
DATA_PAGES = {"/console/audit/"}
OPERATOR = "operator"
ADMIN = "acme-admin"


def forbidden_in(text: str) -> list[str]:
    return [w for w in FORBIDDEN if re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", text)]


def _visible(page: Any) -> str:
    return page.inner_text("header") + "\n" + page.inner_text("main")


def _go(page: Any, base: str, path: str) -> None:
    response = page.goto(base + path)
    assert response is not None and response.status == 200, path
    assert page.locator("main h1").count() >= 1, path


# --- the operator -------------------------------------------------------------------------

def operator_console(page: Any, base: str, lang: str) -> dict[str, list[str]]:
    """Every console page, reached from the header link; returns leftover words per page."""
    left: dict[str, list[str]] = {}
    _go(page, base, "/")
    page.locator("header [data-testid=console-link]").click()
    page.wait_for_url(f"{base}/console/")
    for path in CONSOLE_PAGES:
        _go(page, base, path)
        assert unlabelled_controls(page) == [], path
        if lang == "zh":
            text = _visible(page)
            found = set(forbidden_in(text))
            if path not in DATA_PAGES:
                found |= set(english_words(text)) - CONSOLE_TERMS
            if found:
                left[path] = sorted(found)
        name = path.strip("/").replace("/", "-") or "console"
        shot(page, name if lang == "en" else f"zh-{name}")
    _go(page, base, "/console/fabric/")
    assert unreadable(page) == [], "fabric map labels"
    return left


def operator_changes(page: Any, base: str) -> None:
    """A quota raised (A100 to 64, so a 4-node A100 order fits the quota but not the
    pool), a member invited, re-roled and back, the invitation withdrawn."""
    _go(page, base, "/console/tenants/acme/?edit=A100")
    form = page.locator("#quota-form form")
    form.locator("[name=quota-max_gpus]").fill("64")
    form.locator("[name=quota-reason]").fill("journey")
    form.locator("button[type=submit]").click()
    page.wait_for_load_state()
    if page.locator("#quota-confirm").count():
        page.locator("#quota-confirm input[type=checkbox]").check()
        page.locator("#quota-form button[type=submit]").click()
        page.wait_for_load_state()
    assert "Quota saved." in page.inner_text("main")

    members = page.locator("#members")
    invite = members.locator("form", has=page.locator("[name=invite-email]"))
    invite.locator("[name=invite-email]").fill("newcomer@example.com")
    invite.locator("[name=invite-role]").select_option("viewer")
    invite.locator("button[type=submit]").click()
    page.wait_for_load_state()
    assert "An invitation was sent to newcomer@example.com." in page.inner_text("main")
    row = page.locator("#members tr[data-member=acme-member]")
    row.locator("select").select_option("viewer")
    row.get_by_role("button", name="Change role").click()
    page.wait_for_load_state()
    assert "Role of acme-member changed." in page.inner_text("main")
    assert "Viewer" in page.locator("#members tr[data-member=acme-member]").inner_text()
    row = page.locator("#members tr[data-member=acme-member]")
    row.locator("select").select_option("member")
    row.get_by_role("button", name="Change role").click()
    page.wait_for_load_state()
    lone = page.locator("#members tr[data-member=acme-admin]")
    lone.locator("select").select_option("member")
    lone.get_by_role("button", name="Change role").click()
    page.wait_for_load_state()
    assert "at least one owner or admin" in page.inner_text("main")  # last-admin rule
    shot(page, "console-members")
    page.locator("[data-testid=console-invitations]").get_by_role(
        "button", name="Withdraw").first.click()
    page.wait_for_load_state()
    assert "Invitation to newcomer@example.com withdrawn." in page.inner_text("main")


# --- the tenant admin ---------------------------------------------------------------------

def _order(page: Any, base: str, *, model: str, gpus: int, nodes: int = 1, name: str,
           start_at: str = "") -> str:
    _go(page, base, "/order/")
    for other in ("A100", "H100"):
        box = page.locator(f"input[type=checkbox][value={other}]")
        box.set_checked(other == model)
    page.locator("[name=gpu_count]").fill(str(gpus))
    page.locator("[name=nodes]").fill(str(nodes))
    page.locator("[name=duration_hours]").fill("3")
    page.locator("[name=name]").fill(name)
    if start_at:
        page.locator("input[name=start][value=later]").check()
        page.locator("[name=start_at]").fill(start_at)
    page.locator("[data-testid=quote]").wait_for()
    page.locator("#order-submit").click()
    page.wait_for_url(re.compile(r"/leases/[0-9a-f-]{36}/$"))
    return page.url  # type: ignore[no-any-return]


def _confirm(page: Any, link: str, button: str) -> None:
    page.locator("main").get_by_role("link", name=link).click()
    page.locator("[name=confirm]").check()
    page.locator("main").get_by_role("button", name=button).click()
    page.wait_for_load_state()


def order_to_release(page: Any, base: str) -> None:
    url = _order(page, base, model="H100", gpus=8, name="journey-train")
    page.wait_for_selector("#lease-state [data-state=active]", timeout=90_000)
    shot(page, "lease-active")
    old_end = page.inner_text("#lease-end")
    page.locator("main").get_by_role("link", name="Extend").click()
    page.get_by_role("button", name="Confirm extension").click()
    page.wait_for_url(url)
    assert "Lease extended." in page.inner_text("main")
    assert page.inner_text("#lease-end") != old_end
    _confirm(page, "Release now", "Release now")
    page.wait_for_selector("#lease-state [data-state=ended]", timeout=90_000)


def waiting_order(page: Any, base: str, lang: str) -> str:
    """4 whole A100 nodes: the pool has 4, one shares a GPU with the demo's notebook."""
    _order(page, base, model="A100", gpus=8, nodes=4, name=f"journey-wait-{lang}")
    for _ in range(60):  # the passes that note the reason, the earliest start, the place
        if page.locator("[data-testid=queue-position]").count() and \
                page.locator("[data-testid=wait-reason]").count() and \
                "UTC" in page.inner_text("[data-testid=wait-reason]"):
            break
        page.wait_for_timeout(1000)
        page.reload()
    shot(page, "lease-waiting" if lang == "en" else "zh-lease-waiting")
    assert page.locator("[data-testid=wait-reason]").count(), page.inner_text("main")[:600]
    wait = page.inner_text("[data-testid=wait-reason]")
    position = page.inner_text("[data-testid=queue-position]")
    start = page.inner_text("[data-testid=lease-start]")
    if lang == "en":
        assert "Not enough free A100 GPUs" in wait and "Earliest start:" in wait, wait
        assert position == "No. 1 in the queue", position
        assert "(earliest)" in start, start
    else:
        assert "A100" in wait and "最早开始时间" in wait, wait
        assert "第 1 位" in position, position
    return page.url  # type: ignore[no-any-return]


def reservation(page: Any, base: str, lang: str) -> None:
    at = (datetime.now(UTC) + timedelta(days=2)).replace(minute=0, second=0, microsecond=0)
    _order(page, base, model="H100", gpus=8, name=f"journey-booking-{lang}",
           start_at=f"{at:%Y-%m-%dT%H:%M}")
    page.wait_for_selector("#lease-state .badge", timeout=30_000)
    word = "Scheduled" if lang == "en" else "已调度"
    for _ in range(30):  # accepted by the next pass: queued with reason not_yet
        if word in page.inner_text("#lease-state"):
            break
        page.wait_for_timeout(1000)
        page.reload()
    assert word in page.inner_text("#lease-state"), page.inner_text("#lease-state")
    assert "not_yet" not in page.inner_text("main")
    shot(page, "lease-scheduled" if lang == "en" else "zh-lease-scheduled")


def cancel(page: Any, lang: str) -> None:
    link = "Cancel order" if lang == "en" else "取消订单"
    _confirm(page, link, link)
    page.wait_for_selector("#lease-state [data-state=cancelled]", timeout=30_000)


def invoice_and_exports(page: Any, base: str) -> None:
    for _ in range(40):  # the demo meters every 5 s (tests/browser/conftest.py)
        _go(page, base, "/usage/")
        if page.locator("[data-testid=invoices] tbody tr").count():
            break
        page.wait_for_timeout(1500)
    row = page.locator("[data-testid=invoices] tbody tr").first
    csv = row.locator("a[href$='.csv'], a[href*='csv']").first
    with page.expect_download() as got:
        csv.click()
    assert got.value.suggested_filename.endswith(".csv")
    exports = page.locator("[data-testid=exports] a")
    assert exports.count() == 3
    for i in range(3):
        with page.expect_download() as got:
            exports.nth(i).click()
        path = got.value.path()
        assert path is not None and open(path, "rb").read(), got.value.url
    row.locator("a").first.click()  # view / print
    page.wait_for_load_state()
    assert page.locator("main h1, h1").count() >= 1
    shot(page, "invoice")


# --- the journey --------------------------------------------------------------------------

def test_journey_english_then_chinese(stack: str, browser: Any) -> None:
    op = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US",
                             accept_downloads=True).new_page()
    tenant = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US",
                                 accept_downloads=True).new_page()
    for pg in (op, tenant):
        pg.context.set_default_timeout(30_000)
    sign_in_as(op, stack, OPERATOR)
    operator_console(op, stack, "en")
    operator_changes(op, stack)
    sign_in_as(tenant, stack, ADMIN)
    order_to_release(tenant, stack)
    waiting_order(tenant, stack, "en")
    cancel(tenant, "en")
    reservation(tenant, stack, "en")
    cancel(tenant, "en")
    invoice_and_exports(tenant, stack)
    for path in TENANT_PAGES:
        _go(tenant, stack, path)
        assert unlabelled_controls(tenant) == [], path

    # the same, in zh-hans: chosen with the language switcher in the header
    problems: dict[str, list[str]] = {}
    for pg in (op, tenant):
        pg.select_option("#lang-switch", "zh-hans")
        pg.locator("#lang-switch ~ button").click()
        pg.wait_for_load_state()
        assert pg.locator("html").get_attribute("lang") == "zh-hans"
    problems |= {f"console {k}": v for k, v in operator_console(op, stack, "zh").items()}
    url = waiting_order(tenant, stack, "zh")
    pages = [(p, stack + p) for p in TENANT_PAGES] + [("lease-waiting", url)]
    for name, target in pages:
        tenant.goto(target)
        text = _visible(tenant)
        left = sorted(set(forbidden_in(text)) | set(english_words(text)) - PROPER_NOUNS)
        if left:
            problems[name] = left
        shot(tenant, "zh-" + (name.strip("/").replace("/", "-") or "dashboard"))
    cancel(tenant, "zh")
    (ARTIFACTS / "journey-zh-leftovers.json").write_text(
        json.dumps(problems, ensure_ascii=False, indent=1))
    assert problems == {}, json.dumps(problems, ensure_ascii=False, indent=1)
    publish(["console-fabric", "console-members", "lease-active",
             "lease-waiting", "lease-scheduled", "invoice", "zh-dashboard", "zh-order",
             "zh-console-fabric", "zh-lease-waiting", "zh-usage"])
    op.context.close()
    tenant.context.close()
