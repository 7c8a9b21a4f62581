"""One snapshot shared by the quotes of a moment (a burst of previews builds it once).

A quote is advice shown before an order: it may be ``TTL_S`` old (setting
``GPUPOOL_QUOTE_SNAPSHOT_TTL_S``, default 1 s; 0 turns the sharing off). Placing never
reads it (``allocation.schedule`` builds its own snapshot and drops this one, since the
pass is about to change what it showed). It is shared only while the scheduler cache
holds the same pool (a change of nodes or quotas ends it), so never on SQLite.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from django.conf import settings
from django.db import connection

T = TypeVar("T")

DEFAULT_TTL_S = 1.0


def ttl_s() -> float:
    return float(getattr(settings, "GPUPOOL_QUOTE_SNAPSHOT_TTL_S", DEFAULT_TTL_S))


class QuoteSnapshot(Generic[T]):
    """The adapter's (``allocation.QUOTES``) shared quote snapshot."""

    def __init__(self) -> None:
        self._held: tuple[tuple[str, int], float, T] | None = None
        self._lock = threading.Lock()
        self.builds = 0

    def forget(self) -> None:
        self._held = None

    def get(self, build: Callable[[], T], token: int | None) -> T:
        """The held snapshot when younger than the TTL and built on the same database
        and the same cached pool (``token``; None: share nothing), else a new one."""
        now = time.monotonic()
        key = (str(connection.settings_dict["NAME"]), token or 0)
        with self._lock:
            held = self._held
            if (token is not None and held is not None and held[0] == key
                    and now - held[1] < ttl_s()):
                return held[2]
            snap = build()
            self.builds += 1
            self._held = (key, now, snap) if ttl_s() > 0 and token is not None else None
            return snap

