"""Autovacuum's ANALYZE for a stack whose PostgreSQL runs without autovacuum.

Production PostgreSQL runs autovacuum (the default, and ``docs/deploy.md`` requires it):
it re-analyses a table once a tenth of it changed, so the planner knows a freshly filled
pool has 8,000 GPUs and hundreds of leases. This machine's server has ``autovacuum = off``;
a stack seeded and filled from empty then plans on the statistics of empty tables. At 1,000
nodes that turned the quota check of every placement into a 4.3 s nested loop
(2,352,000 index probes) instead of a 21 ms hash join, and the scheduling pass — which
makes one per placement — held its lock for minutes: the fill stalled (the healing
benchmark, issue 27). So the stack stands in for the daemon: ANALYZE after seeding and then
every ``every_s`` — only where the server's own autovacuum is off.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

log = logging.getLogger(__name__)


def autovacuum_on(conn: Any) -> bool:
    row = conn.execute("SHOW autovacuum").fetchone()
    return bool(row) and str(row[0]).lower() == "on"


class Autoanalyze:
    """ANALYZE the stack's database now and every ``every_s`` in a daemon thread."""

    def __init__(self, connect: Any, every_s: float = 20.0) -> None:
        self._connect = connect
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.runs = 0

    def start(self) -> bool:
        """False (and nothing started) where the server's autovacuum is on."""
        with self._connect() as conn:
            if autovacuum_on(conn):
                return False
        self.analyze()
        self._thread = threading.Thread(target=self._loop, name="autoanalyze", daemon=True)
        self._thread.start()
        return True

    def analyze(self) -> None:
        with self._connect() as conn:
            conn.execute("ANALYZE")
        self.runs += 1

    def _loop(self) -> None:
        while not self._stop.wait(self._every_s):
            try:
                self.analyze()
            except Exception:  # the stack is closing, or PostgreSQL restarts in a test
                log.debug("autoanalyze skipped", exc_info=True)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
