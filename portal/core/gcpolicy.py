"""The cyclic garbage collector in long-running server processes (ADR 0172).

A web or worker process imports Django, DRF, Channels, Celery and the portal (its views
included) before it serves anything: about 147,000 objects the collector tracks and that
live as long as the process (modules, classes, functions, settings, URL patterns). Every
full collection walks all of them again (70–90 ms each on the development machine), and
gen1 passes walk what survived. Measured in the two uvicorn workers of
``make bench-ingest``: the collector took 7.0 % and 8.6 % of their CPU (ADR 0172).

``freeze_startup_heap`` collects once and then moves everything alive into the
collector's permanent generation (``gc.freeze``), which later collections skip. Only
what exists when the process has finished importing is frozen, and it is called BEFORE
the scheduler caches are warmed: a cache is rebuilt every few minutes, and a frozen one
that held reference cycles could never be collected once dropped. Objects made later are
collected as before. ``GPUPOOL_GC_FREEZE=0`` turns it off (to compare).
"""

from __future__ import annotations

import gc
import logging
import os
import threading

log = logging.getLogger(__name__)

_frozen_in: set[int] = set()  # process ids already frozen (a fork starts its own count)
_lock = threading.Lock()


def enabled() -> bool:
    """``settings.GPUPOOL_GC_FREEZE`` (on unless the environment turns it off)."""
    from django.conf import settings

    return bool(getattr(settings, "GPUPOOL_GC_FREEZE", True))


def freeze_startup_heap() -> int:
    """Collect once and freeze what is alive now (once per process); the number of
    objects frozen (0: off, or already done in this process)."""
    if not enabled():
        return 0
    with _lock:
        if os.getpid() in _frozen_in:
            return 0
        _frozen_in.add(os.getpid())
        gc.collect()
        gc.freeze()
        frozen = gc.get_freeze_count()
    log.info("garbage collector: %d start-up objects frozen", frozen)
    return frozen
