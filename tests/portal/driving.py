"""Shared by the leasing and page tests: a frozen clock, on-commit hooks run inside the test
transaction, and ``drive()`` — what beat, the workers and the agents do in production."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from portal.core import clock

_capture: Any = None


@pytest.fixture
def frozen_clock() -> Iterator[datetime]:
    at = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
    clock.freeze(at)
    yield at
    clock.reset()


@pytest.fixture(autouse=True)
def run_on_commit(django_capture_on_commit_callbacks: Any) -> Iterator[None]:
    """Execute on-commit hooks (mail, broadcasts, next steps) inside the test transaction."""
    global _capture
    _capture = django_capture_on_commit_callbacks
    yield
    _capture = None


def drive(rounds: int = 4) -> None:
    """Run the reconciler and the simulated agents until leases settle."""
    from portal.fleet.services import simulate_apply
    from portal.inventory.models import Node
    from portal.leasing.tasks import check_leases_on, reconcile_once

    for _ in range(rounds):
        with _capture(execute=True):
            reconcile_once()
            nodes = list(Node.objects.all())
            for node in nodes:
                simulate_apply(node=node)
            check_leases_on([n.pk for n in nodes])
