"""The scheduler cache (ADR 0125): kept warm between passes, never stale after a change,
whoever made it. The held leases are the lease book's (test_leasebook.py)."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection

from portal.core import clock
from portal.inventory.models import Gpu, Node
from portal.leasing import allocation
from portal.leasing.models import SLOTS_PER_GPU, Allocation, Lease, Quota

pytestmark = [pytest.mark.services("postgres")]


def behind_its_back(sql: str, params: list[Any] | None = None) -> None:
    """Commit ``sql`` from another database connection (as another process would): no
    Django signal, no app hook, nothing this process could notice but the database."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with connection.cursor() as cur:
                cur.execute(sql, params or [])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    assert not errors, errors


@pytest.fixture
def warm(pool_tx: dict[str, Any]) -> dict[str, Any]:
    """The pool committed, and the cache built once (no change since)."""
    allocation.forget_cache()
    allocation.snapshot()
    assert allocation.CACHE._entry is not None, "built outside any change: must be kept"
    return pool_tx


def node_state(snap: Any, name: str) -> str:
    return next(n.state for n in snap.nodes if n.name == name).value


def test_the_cache_is_used_while_nothing_changes(warm: dict[str, Any]) -> None:
    builds, hits = allocation.CACHE.builds, allocation.CACHE.hits
    first = allocation.snapshot()
    second = allocation.snapshot()
    assert allocation.CACHE.builds == builds
    assert allocation.CACHE.hits >= hits + 2
    assert first.topology is second.topology  # the switch graph is built once, too


def test_a_node_changed_by_another_process_is_seen_by_the_next_pass(
        warm: dict[str, Any]) -> None:
    name = Node.objects.order_by("hostname").values_list("hostname", flat=True)[0]
    assert node_state(allocation.snapshot(), name) == "ready"
    behind_its_back("UPDATE inventory_node SET state = 'down' WHERE hostname = %s", [name])
    assert node_state(allocation.snapshot(), name) == "down"


def test_a_heartbeat_alone_keeps_the_cache(warm: dict[str, Any]) -> None:
    builds = allocation.CACHE.builds
    behind_its_back("UPDATE inventory_node SET last_heartbeat = now()")
    allocation.snapshot()
    assert allocation.CACHE.builds == builds


@pytest.mark.parametrize("sql", [
    "UPDATE inventory_gpu SET health = 'failed' WHERE id = (SELECT min(id) FROM inventory_gpu)",
    "DELETE FROM inventory_hcaport",
    "UPDATE leasing_quota SET guaranteed_gpus = 3",
    "UPDATE tenants_tenant SET slug = slug || '-x' WHERE slug = 'b'",
])
def test_every_watched_change_made_elsewhere_rebuilds(warm: dict[str, Any], sql: str) -> None:
    before = allocation.snapshot()
    builds = allocation.CACHE.builds
    behind_its_back(sql)
    after = allocation.snapshot()
    assert allocation.CACHE.builds == builds + 1
    assert (before.nodes, before.topology, dict(before.quotas)) != (
        after.nodes, after.topology, dict(after.quotas))


def test_a_node_added_elsewhere_is_offered(warm: dict[str, Any]) -> None:
    behind_its_back(
        "INSERT INTO inventory_node (hostname, state, cpu_milli, memory_mib, gpu_model, "
        "shared_tenancy, agent_version, created) "
        "VALUES ('late-node', 'ready', 1000, 1000, '', false, '', now())")
    assert "late-node" in {n.name for n in allocation.snapshot().nodes}


def test_a_lease_placed_elsewhere_is_seen_at_once(warm: dict[str, Any],
                                                   frozen_clock: datetime) -> None:
    """Another process's allocation rows are in the next pass, and the static cache stays
    (the lease book re-reads that lease alone)."""
    gpu = Gpu.objects.order_by("node__hostname", "index").select_related("node").first()
    assert gpu is not None
    lease = Lease.objects.create(tenant=warm["a"], start_at=frozen_clock,
                                 end_at=frozen_clock + timedelta(hours=1), state="active")
    allocation.snapshot()
    builds = allocation.CACHE.builds
    behind_its_back(
        "INSERT INTO leasing_allocation (lease_id, gpu_id, node_id, slot, start_at, end_at, "
        "live) SELECT %s, %s, %s, s, %s, %s, true FROM generate_series(0, %s) s",
        [lease.pk, gpu.pk, gpu.node_id, frozen_clock, frozen_clock + timedelta(hours=1),
         SLOTS_PER_GPU - 1])
    snap = allocation.snapshot()
    assert allocation.CACHE.builds == builds  # the static cache stays
    held = {le.id: le for le in snap.leases}[str(lease.pk)]
    assert held.parts[0].node == gpu.node.hostname
    assert held.parts[0].gpus == ((gpu.index, 1000),)


def test_not_kept_when_built_by_a_transaction_that_changed_the_pool(pool: Any) -> None:
    """Built inside a transaction with its own uncommitted inventory change (which may
    still roll back), the cache serves that call and is not kept."""
    allocation.forget_cache()
    Quota.objects.filter(tenant=pool["b"]).update(max_gpus=9)
    allocation.snapshot()
    assert allocation.CACHE._entry is None


def test_a_change_inside_the_pass_transaction_is_seen(pool: Any) -> None:
    allocation.snapshot()
    Node.objects.filter(hostname=Node.objects.order_by("hostname")[0].hostname).update(
        state=Node.State.MAINTENANCE)
    assert "maintenance" in {n.state.value for n in allocation.snapshot().nodes}


def test_a_later_change_by_the_building_transaction_is_seen(warm: dict[str, Any]) -> None:
    """Built in a transaction that already wrote something else (so it has an id below
    the snapshot's ``xmax``), then changing a node itself: seen after its commit."""
    from django.db import transaction

    name = Node.objects.order_by("hostname").values_list("hostname", flat=True)[0]
    allocation.forget_cache()
    with transaction.atomic():
        list(Node.objects.select_for_update().filter(hostname=name))  # takes an id
        behind_its_back("SELECT pg_current_xact_id()")  # a later id completes: xmax > ours
        allocation.snapshot()
        assert allocation.CACHE._entry is not None
        Node.objects.filter(hostname=name).update(state=Node.State.DOWN)
    assert node_state(allocation.snapshot(), name) == "down"


def test_too_old_is_rebuilt(warm: dict[str, Any], monkeypatch: Any) -> None:
    builds = allocation.CACHE.builds
    monkeypatch.setattr(allocation.CACHE, "max_age_s", -1.0)
    allocation.snapshot()
    assert allocation.CACHE.builds > builds


def test_snapshot_equals_a_fresh_read(warm: dict[str, Any], frozen_clock: datetime) -> None:
    """Warm or cold, the same snapshot."""
    warm_snap = allocation.snapshot()
    allocation.forget_cache()
    cold = allocation.snapshot()
    assert (warm_snap.nodes, warm_snap.topology, dict(warm_snap.quotas), warm_snap.leases,
            warm_snap.usage) == (cold.nodes, cold.topology, dict(cold.quotas), cold.leases,
                                 cold.usage)


def test_the_allocation_rows_still_refuse_a_double_booking(warm: dict[str, Any],
                                                           frozen_clock: datetime) -> None:
    """Whatever a snapshot believed, the exclusion constraint refuses a second live
    holder of a slot."""
    from django.db import IntegrityError, transaction

    gpu = Gpu.objects.first()
    assert gpu is not None
    end = frozen_clock + timedelta(hours=1)
    first, second = (Lease.objects.create(tenant=warm["a"], start_at=frozen_clock, end_at=end,
                                          state="active") for _ in range(2))
    Allocation.objects.create(lease=first, gpu=gpu, node_id=gpu.node_id, slot=0,
                              start_at=frozen_clock, end_at=end)
    with pytest.raises(IntegrityError), transaction.atomic():
        Allocation.objects.create(lease=second, gpu=gpu, node_id=gpu.node_id, slot=0,
                                  start_at=clock.now(), end_at=end)
