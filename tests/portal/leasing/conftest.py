from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from portal.tenants.models import Role
from tests.portal import driving
from tests.portal.driving import drive
from tests.portal.factories import add_member

# Shared fixtures (tests/portal/driving.py), made visible to this directory's tests.
frozen_clock = driving.frozen_clock
run_on_commit = driving.run_on_commit
__all__ = ["drive", "frozen_clock", "run_on_commit"]


@pytest.fixture
def pool(db: Any, frozen_clock: datetime) -> dict[str, Any]:
    """4 H100 nodes × 8 under 2 leaves; tenants a (quota 16) and b (quota 8)."""
    a, b = driving.small_pool()
    return {"a": a, "b": b, "alice": add_member(a, "alice", Role.MEMBER),
            "bob": add_member(b, "bob", Role.MEMBER), "viewer": add_member(a, "vic", Role.VIEWER)}


@pytest.fixture
def pool_tx(transactional_db: Any, frozen_clock: datetime) -> dict[str, Any]:
    """The same pool for tests that need real commits (threads, other connections)."""
    return pool.__wrapped__(transactional_db, frozen_clock)  # type: ignore[attr-defined]
