"""The SSRF guard: production settings refuse non-public receivers, at registration, at
every delivery and at every redirect; the connection goes to the checked address."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from portal.tenants.models import Role
from portal.webhooks import egress
from tests.portal.factories import add_member, client_for, make_tenant
from tests.portal.webhooks.conftest import Receiver

PRIVATE = ["http://127.0.0.1:8080/hook", "http://10.1.2.3/hook", "http://169.254.169.254/x",
           "http://[::1]/hook", "http://[::ffff:10.0.0.1]/hook", "http://0.0.0.0/hook",
           "http://224.0.0.1/hook", "http://192.168.1.1/", "http://[fe80::1]/",
           "http://100.64.0.1/"]


@pytest.fixture
def production(settings: Any) -> None:
    settings.GPUPOOL_WEBHOOKS_ALLOW_PRIVATE = False


@pytest.mark.parametrize("ip", ["127.0.0.1", "10.1.2.3", "169.254.1.1", "::1",
                                "::ffff:127.0.0.1", "fc00::1", "0.0.0.0", "240.0.0.1"])
def test_non_public_addresses_are_not_public(ip: str) -> None:
    assert not egress.is_public(ip)


@pytest.mark.parametrize("ip", ["93.184.215.14", "2606:4700::1111", "::ffff:8.8.8.8"])
def test_public_addresses_are_public(ip: str) -> None:
    assert egress.is_public(ip)


@pytest.mark.django_db
@pytest.mark.services("postgres")
@pytest.mark.parametrize("url", PRIVATE)
def test_production_refuses_private_urls_at_registration(production: None, url: str) -> None:
    tenant = make_tenant("a")
    client = client_for(add_member(tenant, "a-admin", Role.ADMIN))
    response = client.post(reverse("webhook-list"), {"url": url, "events": ["*"]},
                           format="json")
    assert response.status_code == 400, response.content
    assert "url" in response.json()["fields"]


@pytest.mark.django_db
@pytest.mark.services("postgres")
def test_production_refuses_a_hostname_resolving_to_a_private_address(
        production: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(egress, "resolve", lambda host, port: ["93.184.215.14", "10.0.0.7"])
    tenant = make_tenant("a")
    client = client_for(add_member(tenant, "a-admin", Role.ADMIN))
    response = client.post(reverse("webhook-list"), {"url": "https://hooks.example.com/x",
                                                     "events": ["*"]}, format="json")
    assert response.status_code == 400
    assert "10.0.0.7" in str(response.json()["fields"]["url"])
    monkeypatch.setattr(egress, "resolve", lambda host, port: ["93.184.215.14"])
    ok = client.post(reverse("webhook-list"), {"url": "https://hooks.example.com/x",
                                               "events": ["*"]}, format="json")
    assert ok.status_code == 201 and ok.json()["secret"].startswith("whsec_")


def test_production_refuses_at_delivery_without_connecting(production: None,
                                                           receiver: Receiver) -> None:
    outcome = egress.post(receiver.url(), headers={}, body=b"{}")
    assert outcome.status is None and "Refused" in outcome.error
    assert receiver.received == []


def test_a_redirect_to_a_private_address_is_refused(production: None, receiver: Receiver,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # the receiver stands in for a public host; the redirect's target is checked again
    monkeypatch.setattr(egress, "is_public", lambda ip: ip == "127.0.0.1")
    receiver.redirects["/hook"] = "http://10.1.2.3/steal"
    outcome = egress.post(receiver.url(), headers={}, body=b"{}")
    assert outcome.status == 307 and "10.1.2.3" in outcome.error
    assert len(receiver.received) == 1


def test_redirects_are_followed_a_few_times_only(receiver: Receiver) -> None:
    receiver.redirects["/hook"] = receiver.url("/hook")
    outcome = egress.post(receiver.url(), headers={}, body=b"{}")
    assert "redirects" in outcome.error
    assert len(receiver.received) == egress.MAX_REDIRECTS + 1


def test_a_checked_redirect_is_followed(receiver: Receiver) -> None:
    receiver.redirects["/old"] = receiver.url("/new")
    outcome = egress.post(receiver.url("/old"), headers={}, body=b'{"a":1}')
    assert outcome.status == 200 and outcome.excerpt == "answer 200"
    assert receiver.at("/new")[0].body == b'{"a":1}'


def test_the_connection_goes_to_the_checked_address_with_the_host_kept(
        receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    looked_up: list[str] = []

    def resolve(host: str, port: int) -> list[str]:
        looked_up.append(host)
        return ["127.0.0.1"]
    monkeypatch.setattr(egress, "resolve", resolve)
    outcome = egress.post(f"http://hooks.invalid:{receiver.port}/hook", headers={}, body=b"{}")
    assert outcome.status == 200
    assert looked_up == ["hooks.invalid"]  # one look-up: no second resolution to rebind
    assert receiver.received[0].headers["host"] == f"hooks.invalid:{receiver.port}"


def test_a_big_response_is_cut_to_an_excerpt(receiver: Receiver) -> None:
    outcome = egress.post(receiver.url("/big"), headers={}, body=b"{}")
    assert outcome.status == 200 and outcome.excerpt == "x" * egress.EXCERPT


def test_non_http_schemes_are_refused() -> None:
    with pytest.raises(egress.Refused):
        egress.pin("file:///etc/passwd")


def test_private_receivers_are_off_by_default_in_production() -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = ("import django; django.setup(); from django.conf import settings as s; "
            "print(s.GPUPOOL_WEBHOOKS_ALLOW_PRIVATE)")
    env = {k: v for k, v in os.environ.items() if k != "GPUPOOL_WEBHOOKS_ALLOW_PRIVATE"}
    outs = {}
    for name in ("production", "development"):
        run_env = {**env, "GPUPOOL_ENV": name, "SECRET_KEY": "x" * 50,
                   "ALLOWED_HOSTS": "gpupool.example", "DJANGO_SETTINGS_MODULE": "portal.settings"}
        outs[name] = subprocess.run([sys.executable, "-c", code], env=run_env, check=True,
                                    cwd=Path(__file__).parents[3], capture_output=True,
                                    text=True, timeout=120).stdout.strip().splitlines()[-1]
    assert outs == {"production": "False", "development": "True"}
