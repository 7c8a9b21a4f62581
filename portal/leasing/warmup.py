"""A Celery worker reads the scheduler's caches as it starts, not on its first pass.

At 10,000 nodes the first ``allocation.snapshot()`` of a worker process builds the
scheduler cache and the lease book (ADR 0125, 0165): about 1 s. Without this, the first
order a worker schedules after a start or a deploy waits for it (seen as the 1.4–2.0 s
maximum of ``schedule_pass`` in ``make bench-latency`` at 10,000 nodes). Prefork pool
children warm up in ``worker_process_init``; a solo or threads pool, which runs tasks in
the worker's own process, in ``worker_ready`` (Celery also sends ``worker_process_init``
there: each process warms once). A failure only leaves the cache cold.

Web processes quote and take orders from the same caches: at 10,000 nodes the first
``POST /orders`` a uvicorn worker served paid the cold build (POST /orders p99 2.7 s in
``make bench-latency``). With ``GPUPOOL_WARM_WEB`` (on in production) ``portal.asgi``
warms each web process in a background thread as it starts (``warm_in_background``):
requests are served meanwhile, and one that needs the snapshot before the thread is done
builds it as before (the caches take a lock; the second reader finds it built).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from portal.core import gcpolicy

log = logging.getLogger(__name__)
_warmed_in: set[int] = set()  # process ids already warmed


def warm_scheduler_caches() -> float | None:
    """Read the snapshot once (the caches keep it); seconds taken, or None on failure."""
    from django.db import close_old_connections

    from portal.leasing import allocation

    started = time.perf_counter()
    try:
        allocation.snapshot()
    except Exception:  # a cold cache is only slower: never stop a worker for it
        log.warning("scheduler caches not warmed at worker start", exc_info=True)
        return None
    finally:
        close_old_connections()
    took = time.perf_counter() - started
    log.info("scheduler caches warmed in %.2f s", took)
    return took


def _runs_tasks_here(consumer: Any) -> bool:
    """The pool runs tasks in this process (solo, threads), not in children."""
    pool = getattr(consumer, "pool", None)
    return type(pool).__module__.rsplit(".", 1)[-1] in ("solo", "thread")


def _once() -> None:
    """A Celery process is ready: freeze its start-up heap (ADR 0172), then warm."""
    if os.getpid() not in _warmed_in:
        _warmed_in.add(os.getpid())
        gcpolicy.freeze_startup_heap()  # before the caches: those are rebuilt, never frozen
        warm_scheduler_caches()


def warm_in_background() -> threading.Thread | None:
    """Warm this web process's caches in a daemon thread when ``GPUPOOL_WARM_WEB`` says
    so (once per process); the thread, or None."""
    from django.conf import settings

    if not getattr(settings, "GPUPOOL_WARM_WEB", False) or os.getpid() in _warmed_in:
        return None
    thread = threading.Thread(target=_once, name="gpupool-warm-web", daemon=True)
    thread.start()
    return thread


def on_worker_ready(sender: Any = None, **_: Any) -> None:
    if _runs_tasks_here(sender):
        _once()


def on_worker_process_init(**_: Any) -> None:
    _once()


def connect() -> None:
    from celery.signals import worker_process_init, worker_ready

    worker_ready.connect(on_worker_ready, weak=False, dispatch_uid="gpupool-warm-ready")
    worker_process_init.connect(on_worker_process_init, weak=False,
                                dispatch_uid="gpupool-warm-children")
