"""SSO against a real OIDC provider running in the suite (oidc-provider-mock, a thread on
127.0.0.1): the code flow through Django's test client, JIT identities, mapping rules,
removal, refusals."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlparse

import jwt
import pytest
import requests
from cryptography.hazmat.primitives.asymmetric import rsa
from django.core.cache import cache
from django.test import Client
from oidc_provider_mock import run_server_in_thread

from portal.sso.models import ExternalIdentity, MappingRule
from portal.tenants import services as tenant_services
from portal.tenants.models import Membership, Role, Tenant
from tests.portal.factories import make_user

CLIENT_ID = "gpupool-test"


@pytest.fixture(scope="module")
def idp() -> Iterator[str]:
    with run_server_in_thread() as server:
        yield f"http://localhost:{server.server_port}"


@pytest.fixture
def sso(idp: str, settings: Any, db: Any) -> dict[str, Any]:
    settings.AXES_ENABLED = False
    settings.GPUPOOL_OIDC_PROVIDERS = json.dumps([{
        "name": "mock", "label": "Mock IdP", "issuer": idp, "client_id": CLIENT_ID,
        "client_secret": "s3cret", "scopes": "openid email profile"}])
    cache.clear()
    acme = Tenant.objects.create(name="Acme", slug="acme")
    MappingRule.objects.create(claim="groups", values="hpc-acme-admins", tenant=acme,
                               role=Role.ADMIN)
    MappingRule.objects.create(claim="groups", values="hpc-acme-users", tenant=acme,
                               role=Role.MEMBER)
    return {"idp": idp, "acme": acme}


def set_claims(idp: str, sub: str, **claims: Any) -> None:
    requests.put(f"{idp}/users/{sub}", json=claims, timeout=5).raise_for_status()


def begin(client: Client) -> dict[str, list[str]]:
    response = client.get("/accounts/oidc/mock/login/")
    assert response.status_code == 302
    return parse_qs(urlparse(response["Location"]).query)


def authorize_at_idp(client: Client, sub: str) -> str:
    """The person picks ``sub`` at the provider; returns the callback URL it sends back."""
    location = client.get("/accounts/oidc/mock/login/")["Location"]
    answer = requests.post(location, data={"sub": sub}, allow_redirects=False, timeout=5)
    assert answer.status_code == 302, answer.text[:300]
    return str(answer.headers["Location"])


def log_in(client: Client, sub: str) -> Any:
    callback = authorize_at_idp(client, sub)
    return client.get(callback.replace("http://testserver", ""))


def test_sign_in_page_has_a_button_per_provider(sso: dict[str, Any]) -> None:
    page = Client().get("/accounts/login/").content.decode()
    assert "Sign in with Mock IdP" in page and "/accounts/oidc/mock/login/" in page


def test_authorization_request_carries_state_nonce_and_pkce(sso: dict[str, Any]) -> None:
    params = begin(Client())
    assert params["code_challenge_method"] == ["S256"]
    assert params["state"][0] and params["nonce"][0] and params["code_challenge"][0]
    assert params["client_id"] == [CLIENT_ID]


def test_first_login_creates_an_account_keyed_on_issuer_and_sub_with_the_groups_role(
        sso: dict[str, Any], django_capture_on_commit_callbacks: Any) -> None:
    set_claims(sso["idp"], "u-1001", email="ada@acme.edu", preferred_username="ada",
               groups=["hpc-acme-admins"])
    client = Client()
    with django_capture_on_commit_callbacks(execute=True) as hooks:
        response = log_in(client, "u-1001")
    assert response.status_code == 302, response.content.decode()[-600:]
    assert response["Location"] == "/"
    identity = ExternalIdentity.objects.get(issuer=sso["idp"], subject="u-1001")
    member = Membership.objects.get(user=identity.user, tenant=sso["acme"])
    assert (member.role, member.source) == (Role.ADMIN, f"oidc:{sso['idp']}")
    assert hooks, "access_changed was not announced"
    assert client.get("/").status_code == 200
    assert not identity.user.has_usable_password()


def test_same_email_as_a_local_user_does_not_link(sso: dict[str, Any]) -> None:
    local = make_user("ada")
    set_claims(sso["idp"], "u-2002", email=local.email, preferred_username="ada",
               groups=["hpc-acme-users"])
    log_in(Client(), "u-2002")
    identity = ExternalIdentity.objects.get(subject="u-2002")
    assert identity.user != local and identity.user.username != "ada"
    assert not Membership.objects.filter(user=local).exists()


def test_group_removed_next_login_removes_membership_and_api_key(
        sso: dict[str, Any], django_capture_on_commit_callbacks: Any) -> None:
    olga = make_user("olga")
    Membership.objects.create(tenant=sso["acme"], user=olga, role=Role.OWNER)
    set_claims(sso["idp"], "u-3003", email="bo@acme.edu", groups=["hpc-acme-users"])
    log_in(Client(), "u-3003")
    user = ExternalIdentity.objects.get(subject="u-3003").user
    issued = tenant_services.api_key_create(actor=user, name="ci", tenant=sso["acme"])
    assert tenant_services.api_key_authenticate(issued.secret) is not None
    set_claims(sso["idp"], "u-3003", email="bo@acme.edu", groups=[])
    with django_capture_on_commit_callbacks(execute=True) as hooks:
        log_in(Client(), "u-3003")
    assert not Membership.objects.filter(user=user, tenant=sso["acme"]).exists()
    assert tenant_services.api_key_authenticate(issued.secret) is None
    assert hooks, "the removal did not push host access"


def test_hand_made_membership_is_left_alone(sso: dict[str, Any]) -> None:
    set_claims(sso["idp"], "u-4004", email="cy@acme.edu", groups=[])
    log_in(Client(), "u-4004")
    user = ExternalIdentity.objects.get(subject="u-4004").user
    Membership.objects.create(tenant=sso["acme"], user=user, role=Role.MEMBER)
    log_in(Client(), "u-4004")
    assert Membership.objects.filter(user=user, tenant=sso["acme"], source="local").exists()


def test_last_admin_is_kept_when_the_group_goes(sso: dict[str, Any]) -> None:
    set_claims(sso["idp"], "u-5005", email="di@acme.edu", groups=["hpc-acme-admins"])
    log_in(Client(), "u-5005")
    set_claims(sso["idp"], "u-5005", email="di@acme.edu", groups=[])
    log_in(Client(), "u-5005")
    user = ExternalIdentity.objects.get(subject="u-5005").user
    assert Membership.objects.get(user=user, tenant=sso["acme"]).role == Role.ADMIN
    from portal.core.models import AuditLog
    assert AuditLog.objects.filter(action="membership.sso_kept").exists()


def test_replayed_state_is_refused(sso: dict[str, Any]) -> None:
    set_claims(sso["idp"], "u-6006", email="ed@acme.edu", groups=[])
    client = Client()
    callback = authorize_at_idp(client, "u-6006").replace("http://testserver", "")
    assert client.get(callback).status_code == 302
    client.logout()
    again = client.get(callback)
    assert again.status_code == 400 and b"already used" in again.content
    assert "_auth_user_id" not in client.session


def test_provider_error_ends_on_a_clear_page(sso: dict[str, Any]) -> None:
    client = Client()
    state = begin(client)["state"][0]
    page = client.get(f"/accounts/oidc/mock/callback/?state={state}&error=access_denied")
    assert page.status_code == 403 and b"Sign-in refused" in page.content


# --- forged tokens: the token endpoint is answered by us, signed as the test says ----------

KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _forged_login(sso: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
                  **overrides: Any) -> Any:
    from portal.sso.backend import ProviderBackend
    client = Client()
    params = begin(client)
    now = int(time.time())
    claims = {"iss": sso["idp"], "aud": CLIENT_ID, "sub": "forged", "iat": now,
              "exp": now + 300, "nonce": params["nonce"][0], **overrides}
    key = overrides.pop("_key", KEY)
    claims.pop("_key", None)
    token = jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})
    monkeypatch.setattr(ProviderBackend, "get_token", lambda self, payload: {
        "id_token": token, "access_token": ""})
    monkeypatch.setattr(ProviderBackend, "retrieve_matching_jwk",
                        lambda self, t: KEY.public_key())
    return client, client.get(
        f"/accounts/oidc/mock/callback/?state={params['state'][0]}&code=x")


@pytest.mark.parametrize(("overrides", "words"), [
    ({"aud": "someone-else"}, b"another application"),
    ({"iss": "https://evil.example"}, b"unexpected issuer"),
    ({"nonce": "not-the-nonce"}, b"Nonce"),
    ({"exp": int(time.time()) - 3600, "iat": int(time.time()) - 7200}, b"expired"),
    ({"_key": rsa.generate_private_key(public_exponent=65537, key_size=2048)},
     b"not valid"),
])
def test_bad_tokens_are_refused_with_a_clear_page(
        sso: dict[str, Any], monkeypatch: pytest.MonkeyPatch, overrides: dict[str, Any],
        words: bytes) -> None:
    client, page = _forged_login(sso, monkeypatch, **overrides)
    assert page.status_code == 403 and words in page.content, page.content[-400:]
    assert "_auth_user_id" not in client.session
    assert not ExternalIdentity.objects.filter(subject="forged").exists()


def test_a_good_forged_path_token_is_accepted(sso: dict[str, Any],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The control for the refusals above: the same path with a correct token signs in."""
    client, page = _forged_login(sso, monkeypatch)
    assert page.status_code == 302 and "_auth_user_id" in client.session


def test_password_refused_for_a_tenant_with_passwords_off(sso: dict[str, Any]) -> None:
    acme = sso["acme"]
    acme.allow_password_login = False
    acme.save()
    bo = make_user("bo")
    Membership.objects.create(tenant=acme, user=bo, role=Role.MEMBER)
    page = Client().post("/accounts/login/", {"username": "bo", "password": "x"})
    from tests.portal.factories import PASSWORD
    page = Client().post("/accounts/login/", {"username": "bo", "password": PASSWORD})
    assert page.status_code == 200 and b"Passwords are turned off for Acme" in page.content
    staff = make_user("root", staff=True)
    Membership.objects.create(tenant=acme, user=staff, role=Role.MEMBER)
    assert Client().post("/accounts/login/", {"username": "root",
                                              "password": PASSWORD}).status_code == 302
