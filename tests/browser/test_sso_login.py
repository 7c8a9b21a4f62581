"""A real browser signs in through the in-suite OIDC provider (oidc-provider-mock) and lands
on the dashboard of the tenant its groups give, with that role."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from django.core.cache import cache
from oidc_provider_mock import run_server_in_thread

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module", autouse=True)
def _orm_beside_playwright() -> Iterator[None]:
    """Playwright's sync API keeps an event loop running in this thread (module-scoped
    browser); the live server's ORM calls here (and the flush after each test) are sync."""
    old = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    yield
    if old is None:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = old


@pytest.fixture
def idp() -> Iterator[str]:
    with run_server_in_thread() as server:
        yield f"http://localhost:{server.server_port}"


def test_browser_login_through_the_provider_lands_in_the_groups_tenant(
        idp: str, live_server: Any, settings: Any, page: Any) -> None:
    from portal.sso.models import ExternalIdentity, MappingRule
    from portal.tenants.models import Membership, Role, Tenant

    settings.AXES_ENABLED = False
    settings.GPUPOOL_OIDC_PROVIDERS = json.dumps([{
        "name": "mock", "label": "Mock IdP", "issuer": idp, "client_id": "gpupool-browser",
        "client_secret": "s3cret"}])
    cache.clear()
    acme = Tenant.objects.create(name="Acme Research", slug="acme")
    MappingRule.objects.create(claim="groups", values="hpc-acme-admins", tenant=acme,
                               role=Role.ADMIN)
    requests.put(f"{idp}/users/kc-77", json={"email": "zoe@acme.edu",
                 "preferred_username": "zoe", "groups": ["hpc-acme-admins"]},
                 timeout=5).raise_for_status()

    page.goto(f"{live_server.url}/accounts/login/")
    page.get_by_role("link", name="Sign in with Mock IdP").click()
    page.wait_for_url(f"{idp}/**")
    page.fill("input[name=sub]", "kc-77")
    page.get_by_role("button", name="Authorize").click()
    page.wait_for_url(f"{live_server.url}/")
    assert "Acme Research" in page.content()
    user = ExternalIdentity.objects.get(issuer=idp, subject="kc-77").user
    assert Membership.objects.get(user=user, tenant=acme).role == Role.ADMIN
