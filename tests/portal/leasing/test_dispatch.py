"""The lifecycle sends Celery work by task name (``lifecycle.dispatch``) and never imports
``portal.leasing.tasks`` (issue 12: the services ↔ orchestration ↔ tasks cycle is gone)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import grimp
import pytest
from django.conf import settings as django_settings

from portal.celery import app
from portal.leasing import services
from portal.leasing.lifecycle import dispatch
from tests.portal.leasing.conftest import drive

ROOT = Path(__file__).resolve().parents[3]


def _registered() -> set[str]:
    app.loader.import_default_modules()  # what a worker does at start: autodiscovery
    return set(app.tasks)


def test_every_name_dispatch_sends_is_a_registered_task() -> None:
    registered = _registered()
    assert set(dispatch.NAMES) <= registered, set(dispatch.NAMES) - registered
    beat = {entry["task"] for entry in django_settings.CELERY_BEAT_SCHEDULE.values()}
    assert beat <= registered, beat - registered  # the beat's names stayed stable


def test_every_constant_of_dispatch_is_in_names() -> None:
    constants = {v for k, v in vars(dispatch).items()
                 if k.isupper() and isinstance(v, str) and v.startswith("portal.")}
    assert constants == set(dispatch.NAMES)


def test_the_lifecycle_never_imports_tasks_or_services() -> None:
    graph = grimp.build_graph("portal")
    for upper in ("portal.leasing.tasks", "portal.leasing.services", "portal.leasing.api"):
        assert not graph.chain_exists(importer="portal.leasing.lifecycle", imported=upper,
                                      as_packages=True), upper
    assert not graph.find_modules_that_directly_import("portal.leasing.tasks") - {
        "portal.leasing"}  # nothing imports the tasks: Celery finds them by autodiscovery


def test_no_lifecycle_ignore_is_left_in_the_contracts() -> None:
    text = (ROOT / ".importlinter").read_text()
    for debt in ("leasing.orchestration", "-> portal.leasing.tasks"):
        assert debt not in text


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[Any, ...]]]:
    seen: list[tuple[str, tuple[Any, ...]]] = []
    monkeypatch.setattr(app, "send_task",
                        lambda name, args=(), **kw: seen.append((name, tuple(args))))
    return seen


def test_an_order_queues_its_steps_by_name(pool: dict[str, Any], run_on_commit: None,
                                           django_capture_on_commit_callbacks: Any,
                                           sent: list[tuple[str, tuple[Any, ...]]]) -> None:
    from django.core.cache import cache

    cache.delete(dispatch.PENDING_KEY)
    spec = services.OrderSpec(models=["H100"], gpu_count=2, duration_hours=Decimal(1))
    with django_capture_on_commit_callbacks(execute=True):
        lease = services.order_create(actor=pool["alice"], tenant=pool["a"], spec=spec)
    assert (dispatch.SCHEDULE_PASS, ()) in sent
    drive(1)  # the pass places it: its provisioning step is sent by name
    assert (dispatch.LEASE_STEP, ("provision", str(lease.pk))) in sent
    assert {name for name, _ in sent} <= set(dispatch.NAMES)
