"""Finding 9 (part): rate limits on sign-in, orders, quotes and key creation; a
Content-Security-Policy on every page, and no template that needs inline script."""

from __future__ import annotations

import re
import secrets
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as dj_settings
from django.test import Client
from django.urls import reverse

from portal.core.csp import HEADER, build_policy
from portal.tenants.models import ApiKey, Role
from tests.portal.factories import PASSWORD, add_member, client_for, make_tenant, make_user

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _no_axes(settings: Any) -> None:
    settings.AXES_ENABLED = False


def tight(settings: Any, **rates: str) -> None:
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {
        **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], **rates}}


def fresh_ip() -> str:
    """A documentation-range address of our own: counters in a shared Redis cache from
    other tests (or an earlier run) never meet this one."""
    return f"2001:db8::{secrets.token_hex(2)}:{secrets.token_hex(2)}"


# --- rate limits ----------------------------------------------------------------------

def test_login_is_rate_limited(db: Any, settings: Any) -> None:
    tight(settings, login="3/min")
    make_user("alice")
    client = Client(REMOTE_ADDR=fresh_ip())
    codes = [client.post(reverse("login"), {"username": "alice", "password": "wrong"}).status_code
             for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    blocked = client.post(reverse("login"), {"username": "alice", "password": PASSWORD})
    assert blocked.status_code == 429 and int(blocked["Retry-After"]) >= 1
    assert Client(REMOTE_ADDR=fresh_ip()).post(
        reverse("login"), {"username": "alice", "password": PASSWORD}).status_code == 302
    assert client.get(reverse("login")).status_code == 200  # reading the form is not limited


@pytest.fixture
def member(db: Any) -> Any:
    tenant = make_tenant("t")
    return add_member(tenant, f"m{secrets.token_hex(3)}", Role.MEMBER)


def test_api_key_creation_is_rate_limited(member: Any, settings: Any) -> None:
    tight(settings, api_keys="2/min")
    api = client_for(member)
    codes = [api.post("/api/v1/api-keys", {"name": f"k{i}"}, format="json").status_code
             for i in range(3)]
    assert codes == [201, 201, 429]
    assert ApiKey.objects.filter(user=member).count() == 2
    assert api.get("/api/v1/api-keys").status_code == 200  # listing is not a creation


def test_quotes_are_rate_limited(member: Any, settings: Any) -> None:
    tight(settings, quotes="1/min")
    api = client_for(member)
    body = {"models": ["H100"], "gpu_count": 1, "duration_hours": 1}
    first = api.post("/api/v1/orders/quote", body, format="json")
    assert first.status_code != 429
    second = api.post("/api/v1/orders/quote", body, format="json")
    assert second.status_code == 429 and "Retry-After" in second


def test_orders_are_rate_limited(member: Any, settings: Any) -> None:
    tight(settings, orders="1/min")
    api = client_for(member)
    body = {"models": ["H100"], "gpu_count": 1, "duration_hours": 1}
    assert api.post("/api/v1/orders", body, format="json").status_code != 429
    assert api.post("/api/v1/orders", body, format="json").status_code == 429


def test_order_page_shares_the_order_limit(member: Any, settings: Any) -> None:
    tight(settings, orders="1/min")
    page = Client()
    page.force_login(member)
    page.post(reverse("web:order"), {})
    assert page.post(reverse("web:order"), {}).status_code == 429
    assert page.get(reverse("web:order")).status_code == 200


def test_every_documented_scope_has_a_rate() -> None:
    rates = dj_settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]
    assert set(dj_settings.GPUPOOL_THROTTLE_ROUTES.values()) <= set(rates)
    doc = (ROOT / "docs/security.md").read_text()
    for scope in rates:
        assert f"`{scope}`" in doc, f"scope {scope} undocumented in docs/security.md"


# --- Content-Security-Policy ------------------------------------------------------------

PAGES = ["/", "/profile/", "/order/", "/leases/", "/leases/calendar/", "/usage/",
         "/tenant/members/", "/tenant/api-keys/", "/tenant/quotas/", "/accounts/login/",
         "/accounts/password/reset/", "/console/", "/admin/", "/api/v1/me", "/api/docs/",
         "/api/redoc/", "/no-such-page/", "/invitations/gpi_nothing/"]


@pytest.mark.parametrize("path", PAGES)
def test_every_page_carries_a_csp(db: Any, path: str) -> None:
    staff = make_user("root", staff=True)
    add_member(make_tenant("t"), "m", Role.ADMIN)
    client = Client()
    client.force_login(staff)
    response = client.get(path)
    policy = response.get(HEADER, "")
    assert "script-src 'self'" in policy, (path, response.status_code, policy)
    assert "'unsafe-inline'" not in policy.split("script-src")[1].split(";")[0]
    assert "'unsafe-eval'" not in policy
    assert "object-src 'none'" in policy and "frame-ancestors 'none'" in policy


def test_csp_nonce_is_fresh_per_request(db: Any) -> None:
    client = Client()
    first, second = (re.search(r"'nonce-([^']+)'", client.get("/accounts/login/")[HEADER])
                     for _ in range(2))
    assert first and second and first.group(1) != second.group(1)


def test_csp_extra_sources_only_on_their_prefix() -> None:
    base = {"script-src": ["'self'", "'nonce'"]}
    extra = {"/api/docs/": {"script-src": ["https://cdn.example"]}}
    assert build_policy(base, extra, "/", "n") == "script-src 'self' 'nonce-n'"
    assert build_policy(base, extra, "/api/docs/", "n") == \
        "script-src 'self' 'nonce-n' https://cdn.example"


SCRIPT = re.compile(r"<script\b([^>]*)>", re.I)
HANDLER = re.compile(r"""<[^>]+\s(on[a-z]+)\s*=""", re.I)


def _templates() -> list[Path]:
    dirs = [ROOT / "templates", *(ROOT / "portal").glob("*/templates")]
    return [p for d in dirs for p in d.rglob("*.html")]


def test_no_template_has_an_unnonced_inline_script_or_handler() -> None:
    problems = []
    templates = _templates()
    assert len(templates) > 20
    for path in templates:
        text = path.read_text(encoding="utf-8")
        for attrs in SCRIPT.findall(text):
            inert = re.search(r"""type=["']application/(ld\+)?json["']""", attrs)
            if "src=" not in attrs and "csp_nonce" not in attrs and not inert:
                problems.append(f"{path.relative_to(ROOT)}: inline <script{attrs}>")
        for handler in HANDLER.findall(text):
            problems.append(f"{path.relative_to(ROOT)}: inline handler {handler}=")
    assert problems == []


def test_template_check_catches_what_it_should(tmp_path: Path) -> None:
    """The two patterns above find an inline script and an on*= handler (members.html had
    ``onsubmit="return confirm(…)"`` before this change)."""
    assert SCRIPT.findall("<script>alert(1)</script>") == [""]
    assert HANDLER.findall('<form onsubmit="return confirm(this.dataset.q)">') == ["onsubmit"]
    assert HANDLER.findall('<form data-confirm="Sure?">') == []


def test_swagger_ui_page_has_no_inline_script(db: Any) -> None:
    client = Client()
    client.force_login(make_user("u"))
    page = client.get("/api/docs/").content.decode()
    assert [a for a in SCRIPT.findall(page) if "src=" not in a] == []
    script = client.get("/api/docs/?script")
    assert script.status_code == 200
    assert script["Content-Type"].startswith("application/javascript")
