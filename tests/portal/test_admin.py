"""Every model is in the Django admin (the operators' baseline console), and pages render."""

from __future__ import annotations

from typing import Any

import pytest
from django.apps import apps
from django.contrib import admin
from django.urls import reverse

from tests.portal.factories import make_user

OWN_APPS = {"core", "tenants", "inventory", "leasing", "fleet", "billing", "console", "web"}


def _models() -> list[Any]:
    return [m for m in apps.get_models() if m._meta.app_label in OWN_APPS]


def test_every_model_is_registered() -> None:
    missing = [m._meta.label for m in _models() if m not in admin.site._registry]
    assert missing == []


@pytest.mark.parametrize("model", _models(), ids=lambda m: m._meta.label)
def test_admin_changelist_renders(db: Any, client: Any, model: Any) -> None:
    staff = make_user("root", staff=True, is_superuser=True)
    client.force_login(staff)
    url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
    assert client.get(url).status_code == 200


def test_gpu_telemetrys_in_the_admin(db: Any, client: Any) -> None:
    """Issue 13: the admin index listed "Gpu telemetrys" (Django's default plural of the
    class name). Every model of ours now reads as a plural a person would write."""
    staff = make_user("root", staff=True, is_superuser=True)
    client.force_login(staff)
    body = client.get(reverse("admin:index")).content.decode()
    assert "Gpu telemetrys" not in body and "Port telemetrys" not in body
    assert ">GPU telemetry<" in body and ">IB port telemetry<" in body
    odd = [m._meta.label for m in _models()
           if str(m._meta.verbose_name_plural).lower().endswith(("telemetrys", "healths"))]
    assert odd == []
