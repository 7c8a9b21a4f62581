"""One snapshot per burst of quotes (``allocation.QUOTES``), never used for placing."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from portal.leasing import allocation
from portal.leasing.models import Lease

pytestmark = [pytest.mark.services("postgres")]


@pytest.fixture
def order(pool_tx: dict[str, Any], frozen_clock: datetime) -> Lease:
    allocation.forget_cache()
    return Lease(tenant=pool_tx["a"], gpu_count=8, start_at=frozen_clock,
                 end_at=frozen_clock + timedelta(hours=1), allowed_models=["H100"],
                 created=frozen_clock)


def test_a_burst_of_quotes_builds_one_snapshot(order: Lease, frozen_clock: datetime,
                                               monkeypatch: Any) -> None:
    built: list[int] = []
    real = allocation.snapshot
    monkeypatch.setattr(allocation, "snapshot", lambda: built.append(1) or real())
    quotes = [allocation.preview(order, frozen_clock) for _ in range(5)]
    assert len(built) == 1
    assert all(q.placeable_now for q in quotes)


def test_placing_never_uses_the_quote_snapshot(order: Lease, frozen_clock: datetime,
                                               monkeypatch: Any) -> None:
    allocation.preview(order, frozen_clock)
    held = allocation.QUOTES._held
    assert held is not None
    seen: list[Any] = []
    real = allocation.core.schedule_pass

    def spy(snap: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(snap)
        return real(snap, *args, **kwargs)

    monkeypatch.setattr(allocation.core, "schedule_pass", spy)
    allocation.schedule([order], frozen_clock)
    assert seen and seen[0] is not held[2]
    assert allocation.QUOTES._held is None  # the pass dropped it: it is about to be wrong


def test_a_pool_change_ends_the_sharing(order: Lease, frozen_clock: datetime) -> None:
    from portal.inventory.models import Node

    allocation.preview(order, frozen_clock)
    builds = allocation.QUOTES.builds
    Node.objects.update(state=Node.State.MAINTENANCE)
    assert not allocation.preview(order, frozen_clock).placeable_now
    assert allocation.QUOTES.builds == builds + 1


def test_the_ttl_bounds_the_sharing(order: Lease, frozen_clock: datetime,
                                    settings: Any) -> None:
    settings.GPUPOOL_QUOTE_SNAPSHOT_TTL_S = 0
    builds = allocation.QUOTES.builds
    allocation.preview(order, frozen_clock)
    allocation.preview(order, frozen_clock)
    assert allocation.QUOTES.builds == builds + 2
