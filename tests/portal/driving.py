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
    from portal.leasing.lifecycle.reconcile import check_leases_on, reconcile_once

    for _ in range(rounds):
        with _capture(execute=True):
            reconcile_once()
            nodes = list(Node.objects.all())
            for node in nodes:
                simulate_apply(node=node)
            check_leases_on([n.pk for n in nodes])


def small_pool() -> tuple[Any, Any]:
    """4 H100 nodes × 8 under 2 leaves; tenants a (quota 16, 8 guaranteed, 1000 GPU-hours,
    48 h leases) and b (quota 8). Callers add the members they need."""
    from portal.inventory.generator import ClusterSpec, cluster_generate
    from portal.leasing.models import Quota
    from tests.portal.factories import make_tenant

    cluster_generate(actor=None, spec=ClusterSpec(nodes=4, gpus_per_node=8, nodes_per_leaf=2,
                                                  spines=1, model="H100"))
    a, b = make_tenant("a"), make_tenant("b")
    Quota.objects.create(tenant=a, gpu_model="H100", max_gpus=16, guaranteed_gpus=8,
                         gpu_hour_budget=1000, max_lease_hours=48)
    Quota.objects.create(tenant=b, gpu_model="H100", max_gpus=8, guaranteed_gpus=0)
    return a, b


def in_threads(n: int, fn: Any) -> list[Any]:
    """Run ``fn(i)`` for i < n in n threads released together (each with its own database
    connection, closed after); re-raises nothing, asserts no thread failed."""
    import threading

    from django.db import connection

    barrier, results, errors = threading.Barrier(n), [None] * n, []

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = fn(i)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return results
