"""Lease e-mails are written in the language each recipient picked in the portal."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest
from django.core import mail
from django.test import Client
from django.utils import translation

from portal.leasing import services
from portal.tenants.models import Role, UserPreference
from tests.portal import driving
from tests.portal.driving import drive
from tests.portal.factories import add_member

frozen_clock = driving.frozen_clock
run_on_commit = driving.run_on_commit


@pytest.fixture(autouse=True)
def _english_after() -> Any:
    yield
    translation.activate("en")


@pytest.fixture
def world(db: Any, frozen_clock: datetime, settings: Any) -> dict[str, Any]:
    settings.AXES_ENABLED = False
    a, _b = driving.small_pool()
    return {"a": a, "alice": add_member(a, "alice", Role.MEMBER),
            "adam": add_member(a, "adam", Role.ADMIN)}


def _order(world: dict[str, Any]) -> None:
    spec = services.OrderSpec(models=["H100"], gpu_count=8, duration_hours=Decimal(2),
                              name="train")
    services.order_create(actor=world["alice"], tenant=world["a"], spec=spec)
    drive()


def test_each_recipient_gets_the_mail_in_their_language(world: dict[str, Any]) -> None:
    UserPreference.objects.create(user=world["alice"], language="zh-hans")
    _order(world)
    active = [m for m in mail.outbox if "train" in m.subject]
    by_to = {tuple(m.to): m for m in active}
    zh, en = by_to[("alice@example.com",)], by_to[("adam@example.com",)]
    assert "已激活" in zh.subject and "现在已激活" in zh.body
    assert "all nodes converged" not in zh.body  # the fixed reason is translated too
    assert en.subject.endswith("is active") and "is now active" in en.body
    assert "all nodes converged" in en.body


def test_without_a_preference_everyone_gets_one_english_mail(world: dict[str, Any]) -> None:
    _order(world)
    active = [m for m in mail.outbox if "is active" in m.subject]
    assert len(active) == 1
    assert sorted(active[0].to) == ["adam@example.com", "alice@example.com"]


def test_language_switch_remembers_the_choice_of_a_signed_in_user(
        world: dict[str, Any]) -> None:
    client = Client()
    client.force_login(world["alice"])
    response = client.post("/i18n/setlang/", {"language": "zh-hans", "next": "/"})
    assert response.status_code == 302
    assert UserPreference.objects.get(user=world["alice"]).language == "zh-hans"
    client.post("/i18n/setlang/", {"language": "klingon", "next": "/"})
    assert UserPreference.objects.get(user=world["alice"]).language == "zh-hans"
    Client().post("/i18n/setlang/", {"language": "en", "next": "/"})  # signed out: no row
    assert UserPreference.objects.count() == 1
