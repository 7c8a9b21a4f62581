"""The lease book (ADR 0165): the held leases kept between passes, re-reading only the
leases the change log names — never stale after a change, whoever made it, and never
holding a change that rolled back."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from portal.inventory.models import Gpu
from portal.leasing import allocation
from portal.leasing.models import SLOTS_PER_GPU, Allocation, Lease
from tests.portal.leasing.test_schedcache import behind_its_back

pytestmark = [pytest.mark.services("postgres")]

BOOK = allocation.BOOK


def hold(tenant: Any, gpu: Gpu, start: datetime, hours: int = 1) -> Lease:
    """A lease holding every slot of ``gpu``, written through the ORM (this connection)."""
    lease = Lease.objects.create(tenant=tenant, start_at=start,
                                 end_at=start + timedelta(hours=hours), state="active")
    Allocation.objects.bulk_create(
        Allocation(lease=lease, gpu=gpu, node_id=gpu.node_id, slot=s, start_at=start,
                   end_at=lease.end_at) for s in range(SLOTS_PER_GPU))
    return lease


def gpus() -> list[Gpu]:
    return list(Gpu.objects.order_by("node__hostname", "index").select_related("node"))


def held(snap: Any) -> dict[str, Any]:
    return {lease.id: lease for lease in snap.leases}


@pytest.fixture
def booked(pool_tx: dict[str, Any], frozen_clock: datetime) -> dict[str, Any]:
    """Two committed leases, and the book read once since."""
    first, second = gpus()[:2]
    pool_tx["held"] = [hold(pool_tx["a"], first, frozen_clock),
                       hold(pool_tx["b"], second, frozen_clock)]
    allocation.forget_cache()
    allocation.snapshot()
    assert BOOK._book is not None
    return pool_tx


def test_nothing_changed_reads_no_lease(booked: dict[str, Any]) -> None:
    full, updates = BOOK.full_reads, BOOK.updates
    with CaptureQueriesContext(connection) as queries:
        snap = allocation.snapshot()
    assert (BOOK.full_reads, BOOK.updates) == (full, updates)
    assert len(snap.leases) == 2
    assert not [q for q in queries.captured_queries
                if "leasing_allocation" in q["sql"] or 'FROM "leasing_lease"' in q["sql"]]


def test_a_lease_placed_elsewhere_is_read_alone(booked: dict[str, Any],
                                                frozen_clock: datetime) -> None:
    gpu = gpus()[5]
    lease = Lease.objects.create(tenant=booked["a"], start_at=frozen_clock,
                                 end_at=frozen_clock + timedelta(hours=2), state="active")
    allocation.snapshot()
    full, reread = BOOK.full_reads, BOOK.reread
    behind_its_back(
        "INSERT INTO leasing_allocation (lease_id, gpu_id, node_id, slot, start_at, end_at, "
        "live) SELECT %s, %s, %s, s, %s, %s, true FROM generate_series(0, %s) s",
        [lease.pk, gpu.pk, gpu.node_id, frozen_clock, lease.end_at, SLOTS_PER_GPU - 1])
    snap = allocation.snapshot()
    assert BOOK.full_reads == full and BOOK.reread == reread + 1  # one lease, 8 slot rows
    assert held(snap)[str(lease.pk)].parts[0] == allocation.core.NodeAllocation(
        node=gpu.node.hostname, gpus=((gpu.index, 1000),))


@pytest.mark.parametrize("sql", [
    "UPDATE leasing_allocation SET live = false WHERE lease_id = %s",
    "DELETE FROM leasing_allocation WHERE lease_id = %s",
])
def test_a_lease_released_elsewhere_is_gone(booked: dict[str, Any], sql: str) -> None:
    gone = booked["held"][0]
    assert str(gone.pk) in held(allocation.snapshot())
    behind_its_back(sql, [gone.pk])
    assert set(held(allocation.snapshot())) == {str(booked["held"][1].pk)}


@pytest.mark.parametrize(("column", "value", "field", "expect"), [
    ("end_at", "end_at + interval '3 hours'", "end", lambda old: old + 3 * 3600),
    ("priority", "'spot'", "priority", lambda old: allocation.core.PriorityClass.SPOT),
    ("borrowed", "true", "borrowed", lambda old: True),
])
def test_a_scheduling_field_changed_elsewhere_is_seen(
        booked: dict[str, Any], column: str, value: str, field: str, expect: Any) -> None:
    lease = booked["held"][0]
    before = getattr(held(allocation.snapshot())[str(lease.pk)], field)
    behind_its_back(f"UPDATE leasing_lease SET {column} = {value} WHERE id = %s", [lease.pk])
    assert getattr(held(allocation.snapshot())[str(lease.pk)], field) == expect(before)


def test_a_change_to_a_field_the_pass_does_not_read_keeps_the_book(
        booked: dict[str, Any]) -> None:
    updates = BOOK.updates
    behind_its_back("UPDATE leasing_lease SET name = 'renamed'")
    allocation.snapshot()
    assert BOOK.updates == updates


def test_a_truncate_elsewhere_reads_everything_again(booked: dict[str, Any]) -> None:
    full = BOOK.full_reads
    # (leasing_miginstance references allocations: truncated with them)
    behind_its_back("TRUNCATE leasing_allocation, leasing_miginstance, leasing_leasechange")
    assert allocation.snapshot().leases == ()
    assert BOOK.full_reads == full + 1


def test_an_own_change_that_rolls_back_is_not_kept(booked: dict[str, Any],
                                                   frozen_clock: datetime) -> None:
    """Read inside a transaction that placed a lease and then rolled back: the next pass
    must not offer that lease's GPUs as held (nor keep a release that never happened)."""
    kept = booked["held"][1]
    seen: dict[str, Any] = {}

    def place_release_and_read() -> None:
        with transaction.atomic():
            seen["placed"] = hold(booked["a"], gpus()[9], frozen_clock)
            Allocation.objects.filter(lease=kept).update(live=False)
            seen["inside"] = held(allocation.snapshot())
            transaction.set_rollback(True)

    place_release_and_read()
    placed = seen["placed"]
    assert str(placed.pk) in seen["inside"] and str(kept.pk) not in seen["inside"]
    after = held(allocation.snapshot())
    assert str(placed.pk) not in after and str(kept.pk) in after


def test_a_change_committed_by_the_reading_transaction_later_is_seen(
        booked: dict[str, Any], frozen_clock: datetime) -> None:
    """Read in a transaction that already has an id, which then places a lease and
    commits: the next pass (another transaction) sees the lease."""
    with transaction.atomic():
        Lease.objects.filter(pk=booked["held"][0].pk).update(name="takes an id")
        behind_its_back("SELECT pg_current_xact_id()")  # a later id completes: xmax > ours
        allocation.snapshot()
        late = hold(booked["b"], gpus()[12], frozen_clock)
    assert str(late.pk) in held(allocation.snapshot())


def test_a_lease_past_its_end_still_holds_until_torn_down(
        booked: dict[str, Any], frozen_clock: datetime) -> None:
    """The recorded end is kept; the end a pass sees moves with the clock."""
    from portal.core import clock

    lease = booked["held"][0]
    Lease.objects.filter(pk=lease.pk).update(start_at=frozen_clock - timedelta(hours=1),
                                             end_at=frozen_clock - timedelta(minutes=5))
    now = int(clock.now().timestamp())
    assert held(allocation.snapshot())[str(lease.pk)].end == now + 1


def test_the_book_equals_a_fresh_read_after_many_changes(
        booked: dict[str, Any], frozen_clock: datetime) -> None:
    all_gpus = gpus()
    extra = [hold(booked["a"] if i % 2 else booked["b"], all_gpus[10 + i], frozen_clock,
                  hours=1 + i) for i in range(6)]
    allocation.snapshot()
    behind_its_back("UPDATE leasing_allocation SET live = false WHERE lease_id = %s",
                    [extra[0].pk])
    behind_its_back("UPDATE leasing_lease SET end_at = end_at + interval '1 hour' "
                    "WHERE id = %s", [extra[3].pk])
    Allocation.objects.filter(lease=extra[5], slot__gte=4).delete()
    warm = allocation.snapshot().leases
    allocation.forget_cache()
    assert warm == allocation.snapshot().leases
    assert len(warm) == 2 + 5


def test_statements_do_not_grow_with_held_leases(pool_tx: dict[str, Any],
                                                 frozen_clock: datetime) -> None:
    """A warm pass costs the same statements with 2 or 20 held leases."""
    def statements() -> int:
        allocation.snapshot()
        with CaptureQueriesContext(connection) as queries:
            allocation.snapshot()
        return len(queries.captured_queries)

    all_gpus = gpus()
    for gpu in all_gpus[:2]:
        hold(pool_tx["a"], gpu, frozen_clock)
    few = statements()
    for gpu in all_gpus[2:20]:
        hold(pool_tx["b"], gpu, frozen_clock)
    assert statements() == few


def test_the_kept_working_state_follows_the_book_without_a_rebuild(
        booked: dict[str, Any], frozen_clock: datetime) -> None:
    """Issue 12, a pass that scales: the core's working state is kept between passes and
    quotes (``allocation.WARM``); a lease released elsewhere is given back in it, not
    rebuilt from every lease, and the forked state sees the GPU free."""
    warm = allocation.WARM
    order = Lease(tenant=booked["a"], gpu_count=8, start_at=frozen_clock,
                  end_at=frozen_clock + timedelta(hours=1), state="queued",
                  created=frozen_clock)
    first = gpus()[0]
    allocation.QUOTES.forget()
    assert allocation.preview(order, frozen_clock).placeable_now
    base = warm._base
    assert base is not None
    node = base.index[first.node.hostname]
    assert base.gpu_free[node][first.index] == 0
    rebuilt, reused = warm.stats.rebuilt, warm.stats.reused
    behind_its_back("UPDATE leasing_allocation SET live = false WHERE lease_id = %s",
                    [booked["held"][0].pk])
    allocation.QUOTES.forget()
    allocation.preview(order, frozen_clock)
    assert (warm.stats.rebuilt, warm.stats.reused) == (rebuilt, reused + 1)
    assert warm._base is base and base.gpu_free[node][first.index] == 1000
    allocation.forget_cache()
    assert warm._base is None
