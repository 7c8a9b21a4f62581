"""A small pool, two tenants and signed-in clients for the page tests."""

from __future__ import annotations

import base64
import os
import struct
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from portal.core import clock
from portal.leasing import services
from portal.leasing.models import Lease
from portal.tenants.models import Role
from tests.portal import driving
from tests.portal.driving import drive
from tests.portal.factories import add_member

# Shared fixtures (tests/portal/driving.py), made visible to this directory's tests.
frozen_clock = driving.frozen_clock
run_on_commit = driving.run_on_commit
__all__ = ["drive", "frozen_clock", "run_on_commit"]


@pytest.fixture(autouse=True)
def _no_axes_between_tests(settings: Any) -> None:
    settings.AXES_ENABLED = False


@pytest.fixture
def pool(db: Any, frozen_clock: datetime) -> dict[str, Any]:
    """4 H100 nodes × 8; tenant a (alice member, adam admin, vic viewer), tenant b (bob)."""
    a, b = driving.small_pool()
    return {"a": a, "b": b, "alice": add_member(a, "alice", Role.MEMBER),
            "adam": add_member(a, "adam", Role.ADMIN),
            "vic": add_member(a, "vic", Role.VIEWER), "bob": add_member(b, "bob", Role.MEMBER)}


def client_for(user: Any) -> Client:
    c = Client()
    c.force_login(user)
    return c


@pytest.fixture
def alice(pool: dict[str, Any]) -> Client:
    return client_for(pool["alice"])


def order(pool: dict[str, Any], who: str = "alice", tenant: str = "a", **kw: Any) -> Lease:
    spec = services.OrderSpec(**{"models": ["H100"], "gpu_count": 8,
                                 "duration_hours": Decimal(2), **kw})
    return services.order_create(actor=pool[who], tenant=pool[tenant], spec=spec)


def active_lease(pool: dict[str, Any], **kw: Any) -> Lease:
    lease = order(pool, **kw)
    drive()
    lease.refresh_from_db()
    assert lease.state == "active", lease.state
    return lease


def ed25519_line(seed: int = 1, comment: str = "me@host") -> str:
    body = struct.pack(">I", 11) + b"ssh-ed25519" + struct.pack(">I", 32) + bytes([seed]) * 32
    return f"ssh-ed25519 {base64.b64encode(body).decode()} {comment}"


def later(hours: int) -> str:
    return (clock.now() + timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M")


def order_form(**overrides: Any) -> dict[str, Any]:
    data = {"models": ["H100"], "gpu_count": "8", "gpu_milli": "1000", "nodes": "1",
            "locality": "any", "priority": "on_demand", "start": "now", "start_at": "",
            "duration_hours": "2", "name": "train", "idempotency_key": os.urandom(8).hex()}
    data.update(overrides)
    return data
