"""Strict input (issue 28): every write endpoint of the API refuses a body field it does not
know with a 400 naming it, instead of ignoring it. The routes come from the access matrix
(itself guarded against the URL conf) and are checked against the OpenAPI schema, so a new
write endpoint cannot escape this test."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse
from drf_spectacular.generators import SchemaGenerator
from rest_framework import serializers

from portal.core.api.serializers import StrictSerializer
from portal.core.models import AuditLog
from portal.leasing.models import Lease
from portal.tenants.models import ApiKey, Invitation, Membership, Tenant
from tests.portal import test_access_matrix as matrix
from tests.portal.factories import client_for

world = matrix.world  # the access matrix's world: tenant a, its members, objects, staff
WRITE_METHODS = {"POST", "PUT", "PATCH"}
WRITES = sorted(key for key in matrix.MATRIX if key[1] in WRITE_METHODS)
# A field no endpoint knows (``mig_profile`` was the issue-28 example until orders learnt it,
# ADR 0222; a misspelling of it is the next best).
EXTRA = {"mig_profil": "1g.10gb"}


def _role(expected: dict[str, int]) -> str:
    """A caller the endpoint lets through to its body: one it answers 2xx, else the first
    authenticated one it does not refuse by role (e.g. 404 for an unknown token)."""
    ok = [r for r, code in expected.items() if 200 <= code < 300]
    return ok[0] if ok else next(r for r, code in expected.items() if code not in (401, 403))


def _counts() -> tuple[int, ...]:
    return tuple(m.objects.count() for m in (Tenant, Membership, Invitation, ApiKey, Lease,
                                             AuditLog))


@pytest.mark.parametrize(("name", "method"), WRITES)
def test_every_write_endpoint_refuses_an_unknown_field(world: dict[str, Any], name: str,
                                                       method: str) -> None:
    kind, body, expected = matrix.MATRIX[(name, method)]
    url = reverse(name, kwargs=matrix._kwargs(kind, world))
    client = client_for(world["users"][_role(expected)])
    before = _counts()
    response = getattr(client, method.lower())(url, {**body, **EXTRA}, format="json")
    assert response.status_code == 400, (name, response.content[:300])
    data = response.json()
    assert data["error"] == "invalid"
    assert data["fields"]["mig_profil"] == ["Unknown field."], data
    assert _counts() == before


def test_the_walk_covers_every_write_operation_of_the_openapi_schema() -> None:
    """Every POST/PUT/PATCH of the schema is walked: those with a body and the actions
    that take none (their empty serializer still refuses an unknown field, above)."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    writes = {(path, method.upper()) for path, ops in schema["paths"].items()
              for method in ops if method.upper() in WRITE_METHODS}
    assert len(writes) == len(WRITES), (sorted(writes), WRITES)


def test_order_with_a_misspelt_mig_profile_is_refused_not_silently_whole_gpu(
        world: dict[str, Any]) -> None:
    client = client_for(world["users"]["member"])
    order = {"models": ["H100"], "gpu_count": 1, "duration_hours": 1, "mig_profil": "1g.10gb"}
    response = client.post(reverse("order-create"), order, format="json")
    assert response.status_code == 400
    assert response.json()["fields"] == {"mig_profil": ["Unknown field."]}
    assert not Lease.objects.filter(tenant=world["a"]).exclude(
        pk__in=[world["lease"].pk, world["active_lease"].pk]).exists()


def test_unknown_fields_are_named_next_to_other_field_errors(world: dict[str, Any]) -> None:
    client = client_for(world["users"]["member"])
    response = client.post(reverse("order-quote"), {"gpu_count": 0, "gpus": 2}, format="json")
    fields = response.json()["fields"]
    assert response.status_code == 400
    assert fields["gpus"] == ["Unknown field."] and "gpu_count" in fields


def test_a_field_the_update_does_not_change_is_refused(world: dict[str, Any]) -> None:
    client = client_for(world["users"]["admin"])
    url = reverse("tenant-detail", kwargs={"slug": "a"})
    response = client.patch(url, {"name": "A2", "slug": "other"}, format="json")
    assert response.status_code == 400
    assert "slug" in response.json()["fields"]
    assert Tenant.objects.filter(slug="a", name="A").exists()


class _WithReadOnly(StrictSerializer):
    name = serializers.CharField()
    created = serializers.DateTimeField(read_only=True)


def test_a_read_only_field_in_a_body_is_refused_as_such() -> None:
    body = _WithReadOnly(data={"name": "x", "created": "2026-01-01T00:00:00Z", "zz": 1})
    assert not body.is_valid()
    assert body.errors == {"created": ["Read-only field."], "zz": ["Unknown field."]}
    assert _WithReadOnly(data={"name": "x"}).is_valid()


def test_the_refusal_follows_the_language_the_field_name_does_not(
        world: dict[str, Any]) -> None:
    client = client_for(world["users"]["member"])
    response = client.post(reverse("order-quote"), {"duration_hours": 1, "mig_profil": "x"},
                           format="json", HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert response.status_code == 400
    assert response.json()["fields"] == {"mig_profil": ["未知字段。"]}


def test_a_form_posts_csrf_token_is_transport_not_an_unknown_field(
        world: dict[str, Any]) -> None:
    client = client_for(world["users"]["member"])
    form = {"duration_hours": "1", "csrfmiddlewaretoken": "t"}
    response = client.post(reverse("order-quote"), form, format="multipart")
    assert response.status_code == 200, response.content[:300]
    response = client.post(reverse("order-quote"), {**form, "gpus": "2"}, format="multipart")
    assert response.json()["fields"] == {"gpus": ["Unknown field."]}
