"""One snapshot shared by the quotes of a moment (a burst of previews builds it once).

A quote is advice shown before an order: it may be ``TTL_S`` old (setting
``GPUPOOL_QUOTE_SNAPSHOT_TTL_S``, default 1 s; 0 turns the sharing off). Placing never
reads it (``allocation.schedule`` builds its own snapshot and drops this one, since the
pass is about to change what it showed).
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
        self._held: tuple[str, float, T] | None = None
        self._lock = threading.Lock()
        self.builds = 0

    def forget(self) -> None:
        self._held = None

    def get(self, build: Callable[[], T]) -> T:
        """The held snapshot when younger than the TTL (same database), else a new one."""
        database, now = str(connection.settings_dict["NAME"]), time.monotonic()
        with self._lock:
            held = self._held
            if held is not None and held[0] == database and now - held[1] < ttl_s():
                return held[2]
            snap = build()
            self.builds += 1
            self._held = (database, now, snap) if ttl_s() > 0 else None
            return snap

