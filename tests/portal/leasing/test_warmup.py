"""A Celery worker warms the scheduler caches as it starts (``portal.leasing.warmup``)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from celery.concurrency import prefork, solo, thread

from portal.leasing import allocation, warmup

pytestmark = [pytest.mark.services("postgres")]


@pytest.fixture(autouse=True)
def _fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warmup, "_warmed_in", set())


@pytest.mark.parametrize("pool", [solo.TaskPool, thread.TaskPool])
def test_a_worker_that_runs_tasks_itself_starts_warm(pool_tx: dict[str, Any],
                                                     pool: type) -> None:
    allocation.forget_cache()
    warmup.on_worker_ready(sender=SimpleNamespace(pool=pool.__new__(pool)))
    assert allocation.CACHE._entry is not None
    assert allocation.BOOK._book is not None
    builds, full = allocation.CACHE.builds, allocation.BOOK.full_reads
    allocation.snapshot()  # the first pass finds both warm
    assert (allocation.CACHE.builds, allocation.BOOK.full_reads) == (builds, full)


def test_a_prefork_parent_does_not_warm_but_its_children_do(pool_tx: dict[str, Any]) -> None:
    allocation.forget_cache()
    warmup.on_worker_ready(sender=SimpleNamespace(pool=prefork.TaskPool.__new__(
        prefork.TaskPool)))
    assert allocation.CACHE._entry is None  # the parent runs no task
    warmup.on_worker_process_init()
    assert allocation.CACHE._entry is not None


def test_each_process_warms_once(pool_tx: dict[str, Any]) -> None:
    """A solo pool gets both signals in one process: one warm-up."""
    warmup.on_worker_process_init()
    builds = allocation.CACHE.builds
    allocation.forget_cache()
    warmup.on_worker_ready(sender=SimpleNamespace(pool=solo.TaskPool.__new__(solo.TaskPool)))
    assert allocation.CACHE.builds == builds and allocation.CACHE._entry is None


def test_a_failed_warm_up_leaves_the_worker_running(pool_tx: dict[str, Any],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> None:
        raise RuntimeError("database away")

    monkeypatch.setattr(allocation, "snapshot", broken)
    assert warmup.warm_scheduler_caches() is None


def test_the_handlers_are_connected() -> None:
    """Connected at start-up (``LeasingConfig.ready``), for any sender."""
    from celery.signals import worker_process_init, worker_ready

    assert warmup.on_worker_ready in worker_ready._live_receivers(None)
    assert warmup.on_worker_process_init in worker_process_init._live_receivers(None)


def test_a_web_process_warms_in_the_background_when_told(pool_tx: dict[str, Any],
                                                         settings: Any) -> None:
    """``GPUPOOL_WARM_WEB`` (on in production): ``portal.asgi`` calls this as a web
    process starts; the first quote or order then finds the caches built."""
    settings.GPUPOOL_WARM_WEB = True
    allocation.forget_cache()
    thread = warmup.warm_in_background()
    assert thread is not None
    thread.join(30)
    assert allocation.CACHE._entry is not None and allocation.BOOK._book is not None
    assert warmup.warm_in_background() is None  # once per process


def test_a_web_process_does_not_warm_unless_told(settings: Any) -> None:
    settings.GPUPOOL_WARM_WEB = False
    assert warmup.warm_in_background() is None


def test_production_warms_web_processes() -> None:
    import subprocess
    import sys

    code = "from django.conf import settings; print(settings.GPUPOOL_WARM_WEB)"
    env = {"GPUPOOL_ENV": "production", "SECRET_KEY": "x" * 50, "ALLOWED_HOSTS": "a.example",
           "DJANGO_SETTINGS_MODULE": "portal.settings", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", f"import django; django.setup(); {code}"],
                         env=env, capture_output=True, text=True, check=False)
    assert out.stdout.strip().splitlines()[-1:] == ["True"], out.stderr[-2000:]
