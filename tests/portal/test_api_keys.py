from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from portal.tenants.models import ApiKey, Role
from portal.tenants.services import hash_secret
from tests.portal.factories import add_member, client_for, make_tenant


def _issue(user: Any, **body: Any) -> dict[str, Any]:
    response = client_for(user).post(reverse("apikey-list"), {"name": "ci", **body}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def _bearer(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def test_secret_shown_once_and_stored_hashed(db: Any) -> None:
    user = add_member(make_tenant("a"), "alice", Role.MEMBER)
    issued = _issue(user)
    key = ApiKey.objects.get(pk=issued["id"])
    assert issued["secret"].startswith("gpk_") and key.secret_hash == hash_secret(issued["secret"])
    assert issued["secret"] not in key.secret_hash
    listing = client_for(user).get(reverse("apikey-list")).content.decode()
    assert issued["secret"] not in listing and "secret_hash" not in listing


def test_key_authenticates_acts_for_its_tenant_and_records_use(db: Any) -> None:
    user = add_member(make_tenant("a"), "alice", Role.MEMBER)
    issued = _issue(user, tenant="a")
    response = _bearer(issued["secret"]).get(reverse("me"))
    assert response.status_code == 200
    assert response.json()["username"] == "alice" and response.json()["active_tenant"] == "a"
    assert ApiKey.objects.get(pk=issued["id"]).last_used_at is not None


def test_revoked_expired_and_forged_keys_fail(db: Any) -> None:
    user = add_member(make_tenant("a"), "alice", Role.MEMBER)
    issued = _issue(user)
    assert client_for(user).delete(reverse("apikey-detail", kwargs={"pk": issued["id"]})
                                   ).status_code == 204
    assert _bearer(issued["secret"]).get(reverse("me")).status_code == 401
    other = _issue(user)
    ApiKey.objects.filter(pk=other["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert _bearer(other["secret"]).get(reverse("me")).status_code == 401
    forged = other["secret"][:-4] + "AAAA"
    assert _bearer(forged).get(reverse("me")).status_code == 401
    assert _bearer("gpk_nope").get(reverse("me")).status_code == 401


def test_key_for_foreign_tenant_is_refused(db: Any) -> None:
    make_tenant("b")
    user = add_member(make_tenant("a"), "alice", Role.MEMBER)
    response = client_for(user).post(reverse("apikey-list"), {"name": "x", "tenant": "b"},
                                     format="json")
    assert response.status_code == 404
    assert not ApiKey.objects.exists()
