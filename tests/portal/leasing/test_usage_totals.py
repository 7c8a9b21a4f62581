"""Fair-share usage as decayed running totals equals re-reading the whole history."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import scheduler as core
from portal.leasing import allocation, usage
from portal.leasing.models import Lease
from scheduler.fairshare import decayed_usage
from scheduler.model import DEFAULT_HALF_LIFE_S

pytestmark = [pytest.mark.services("postgres")]

HOUR = 3600
# one lease: tenant, GPUs, nodes, milli, began (h before now), ran (h; None: running),
# and what happens next: nothing, it ends now, it is deleted, its size changes
LEASE = st.tuples(st.sampled_from("ab"), st.integers(1, 8), st.integers(1, 2),
                  st.sampled_from([1000, 500, 125]), st.integers(0, 24 * 60),
                  st.one_of(st.none(), st.integers(0, 48)),
                  st.sampled_from(["keep", "keep", "end", "delete", "resize"]))


def as_core(records: tuple[usage.Record, ...]) -> tuple[core.UsageRecord, ...]:
    return tuple(core.UsageRecord(t, s, at) for t, s, at in records)


def decayed(records: tuple[usage.Record, ...], now: datetime) -> dict[str, float]:
    return decayed_usage(as_core(records), int(now.timestamp()), core.FairShareConfig())


def make(pool: dict[str, Any], spec: tuple[Any, ...], now: datetime) -> Lease:
    tenant, gpus, nodes, milli, began_h, ran_h, _ = spec
    if milli < 1000:
        gpus, nodes = 1, 1
    began = now - timedelta(hours=began_h, minutes=7)
    ended = None if ran_h is None else min(began + timedelta(hours=ran_h, seconds=13), now)
    return Lease.objects.create(
        tenant=pool[tenant], gpu_count=gpus, nodes=nodes, gpu_milli=milli, start_at=began,
        end_at=began + timedelta(days=4), active_at=began, ended_at=ended,
        state="ended" if ended else "active")


def then(lease: Lease, action: str, now: datetime) -> None:
    if action == "end" and lease.ended_at is None:
        Lease.objects.filter(pk=lease.pk).update(ended_at=now, state="ended")
    elif action == "delete":
        lease.delete()
    elif action == "resize":
        Lease.objects.filter(pk=lease.pk).update(gpu_count=lease.gpu_count % 8 + 1)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(history=st.lists(LEASE, max_size=12), later_h=st.integers(0, 400))
def test_totals_equal_the_history(pool: dict[str, Any], frozen_clock: datetime,
                                  history: list[tuple[Any, ...]], later_h: int) -> None:
    Lease.objects.all().delete()
    now = frozen_clock
    for spec in history:
        then(make(pool, spec, now), spec[-1], now)
    later = now + timedelta(hours=later_h)  # decay goes on without any write
    for at in (now, later):
        old, new = decayed(usage.from_history(at), at), decayed(usage.records(at), at)
        assert set(new) <= set(old) | {t for t, v in new.items() if abs(v) < 1e-6}
        for tenant in old:
            assert math.isclose(new.get(tenant, 0.0), old[tenant], rel_tol=1e-9,
                                abs_tol=1e-6), tenant
    old_u = decayed(usage.from_history(later), later)
    assume(abs(old_u.get("a", 0.0) - old_u.get("b", 0.0)) > 1e-3)  # no near-tie
    queue = [core.Request(f"r{i}", tenant, gpus=1, end=HOUR, submitted_at=i)
             for i, tenant in enumerate("abab")]
    order = [core.queue_order(core.Snapshot(nodes=(), usage=as_core(records)), queue,
                              int(later.timestamp()))
             for records in (usage.from_history(later), usage.records(later))]
    assert [r.id for r in order[0]] == [r.id for r in order[1]]


def test_a_lease_ending_is_folded_once(pool: dict[str, Any], frozen_clock: datetime) -> None:
    """Saving an ended lease again (any other field) does not charge it twice."""
    lease = make(pool, ("a", 8, 1, 1000, 10, None, "keep"), frozen_clock)
    lease.ended_at, lease.state = frozen_clock, "ended"
    lease.save()
    lease.name = "renamed"
    lease.save()
    Lease.objects.filter(pk=lease.pk).update(wait_reason="x")
    got = decayed(usage.records(frozen_clock), frozen_clock)
    assert math.isclose(got["a"], decayed(usage.from_history(frozen_clock), frozen_clock)["a"])
    assert math.isclose(got["a"], 8 * (10 * HOUR + 7 * 60), rel_tol=1e-9)


def test_the_pass_reads_usage_in_one_query(pool: dict[str, Any], frozen_clock: datetime,
                                           django_assert_max_num_queries: Any) -> None:
    """However long the history, usage is one query (no lease history re-read)."""
    for i in range(30):
        make(pool, ("ab"[i % 2], 1, 1, 1000, i + 2, 1, "keep"), frozen_clock)
    with django_assert_max_num_queries(1):
        records = usage.records(frozen_clock)
    assert len(records) == 2  # one per tenant, not one per lease


def test_rebuild_gives_the_same_totals(pool: dict[str, Any], frozen_clock: datetime) -> None:
    for i in range(6):
        make(pool, ("ab"[i % 2], i + 1, 1, 1000, 3 * i + 2, i, "keep"), frozen_clock)
    before = decayed(usage.records(frozen_clock), frozen_clock)
    usage.rebuild()
    after = decayed(usage.records(frozen_clock), frozen_clock)
    assert before.keys() == after.keys()
    assert all(math.isclose(before[t], after[t], rel_tol=1e-9) for t in before)


def test_the_half_life_is_the_core_default() -> None:
    assert usage.HALF_LIFE_S == DEFAULT_HALF_LIFE_S


def test_queue_positions_use_the_totals(pool: dict[str, Any], frozen_clock: datetime,
                                        monkeypatch: Any) -> None:
    def no_history(now: datetime) -> None:
        raise AssertionError("the lease history was read")

    monkeypatch.setattr(usage, "from_history", no_history)
    make(pool, ("a", 8, 1, 1000, 30, 20, "keep"), frozen_clock)
    assert allocation._usage(frozen_clock)
