"""Builders for portal tests (kept tiny and explicit)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from portal.tenants.models import Membership, Tenant

PASSWORD = "correct-horse-battery"


def make_user(username: str, *, staff: bool = False, **extra: Any) -> Any:
    user = get_user_model().objects.create_user(
        username=username, email=f"{username}@example.com", password=PASSWORD, **extra)
    if staff:
        user.is_staff = True
        user.save(update_fields=["is_staff"])
    return user


def make_tenant(slug: str, **extra: Any) -> Tenant:
    return Tenant.objects.create(slug=slug, name=slug.title(), **extra)


def add_member(tenant: Tenant, username: str, role: str) -> Any:
    user = make_user(username)
    Membership.objects.create(tenant=tenant, user=user, role=role)
    return user


def client_for(user: Any | None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client
