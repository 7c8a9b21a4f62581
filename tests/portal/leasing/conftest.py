from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from portal.core import clock
from portal.inventory.generator import ClusterSpec, cluster_generate
from portal.leasing.models import Quota
from portal.leasing.tasks import reconcile_once
from portal.tenants.models import Role
from tests.portal.factories import add_member, make_tenant


@pytest.fixture
def frozen_clock() -> Iterator[datetime]:
    at = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
    clock.freeze(at)
    yield at
    clock.reset()


@pytest.fixture
def pool(db: Any, frozen_clock: datetime) -> dict[str, Any]:
    """4 H100 nodes × 8 under 2 leaves; tenants a (quota 16) and b (quota 8)."""
    cluster_generate(actor=None, spec=ClusterSpec(nodes=4, gpus_per_node=8, nodes_per_leaf=2,
                                                  spines=1, model="H100"))
    a, b = make_tenant("a"), make_tenant("b")
    Quota.objects.create(tenant=a, gpu_model="H100", max_gpus=16, guaranteed_gpus=8,
                         gpu_hour_budget=1000, max_lease_hours=48)
    Quota.objects.create(tenant=b, gpu_model="H100", max_gpus=8, guaranteed_gpus=0)
    return {"a": a, "b": b, "alice": add_member(a, "alice", Role.MEMBER),
            "bob": add_member(b, "bob", Role.MEMBER), "viewer": add_member(a, "vic", Role.VIEWER)}


_capture: Any = None


@pytest.fixture(autouse=True)
def _run_on_commit(django_capture_on_commit_callbacks: Any) -> Iterator[None]:
    """Execute on-commit hooks (mail, broadcasts) inside the test transaction."""
    global _capture
    _capture = django_capture_on_commit_callbacks
    yield
    _capture = None


def drive(rounds: int = 4) -> None:
    """Run the reconciler until the world settles (what beat + workers do in production)."""
    from portal.fleet.services import simulate_apply
    from portal.inventory.models import Node
    from portal.leasing.tasks import check_leases_on

    for _ in range(rounds):
        with _capture(execute=True):
            reconcile_once()
            nodes = list(Node.objects.all())
            for node in nodes:
                simulate_apply(node=node)
            check_leases_on([n.pk for n in nodes])


@pytest.fixture
def pool_tx(transactional_db: Any, frozen_clock: datetime) -> dict[str, Any]:
    """The same pool for tests that need real commits (threads, other connections)."""
    return pool.__wrapped__(transactional_db, frozen_clock)  # type: ignore[attr-defined]
