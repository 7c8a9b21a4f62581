"""The scheduler cache: what rarely changes, kept warm between passes (ADR 0125).

Like kube-scheduler's cache, a worker keeps the nodes, their GPUs, the switch topology
(with the switch graph the core builds from it), the tenants' slugs and the quotas in
memory, instead of reading and translating them on every pass and every quote (what is
kept is built by the adapter, ``allocation._static``; this module only knows when it is
still valid).

Validation is one indexed query per use. On PostgreSQL, triggers (migration
``0005_passscale_schedcache``) append a row stamped with the writing transaction's id to
``leasing_schedchange`` whenever a watched column changes, whoever writes it (another
process, raw SQL, a bulk update). A cache remembers which transactions its reads could
not see (those running when it began, and all later ones: ``pg_current_snapshot()``):
every change it may have missed carries one of those ids, so it is stale as soon as such
a row exists, and is then rebuilt. It is also rebuilt after ``MAX_AGE_S``, when the
database differs, on any error, and never kept when built inside a transaction that
itself changed what it holds (that transaction could still roll back). Elsewhere
(SQLite) nothing is kept.

The leases are not cached (``allocation`` reads them each pass, cheaply), so a stale
cache could only offer a node that is gone or keep one that came back out of a pass; the
allocation rows and their exclusion constraint stay the guard against double booking.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from django.db import DatabaseError, connection, transaction

log = logging.getLogger(__name__)

MAX_AGE_S = 60.0

T = TypeVar("T")


# What this statement's snapshot may not see: transactions running then (``xip``) and
# those not yet begun (``>= xmax``); everything older is committed or rolled back.
UNSEEN = ("SELECT pg_current_snapshot()::text, "  # 'xmin:xmax:xip,xip,...'
          "pg_current_xact_id_if_assigned()::text")
CHANGED_SINCE = ("SELECT EXISTS (SELECT 1 FROM leasing_schedchange "
                 "WHERE xid >= %s::xid8 OR xid = ANY(%s::xid8[]))")
CHANGED_HERE = ("SELECT EXISTS (SELECT 1 FROM leasing_schedchange "
                "WHERE xid = pg_current_xact_id_if_assigned())")
PRUNE = "DELETE FROM leasing_schedchange WHERE created < now() - interval '1 day'"


def _scalar(sql: str, params: tuple[object, ...] = ()) -> object:
    with connection.cursor() as cur:
        cur.execute(sql, params)
        row = cur.fetchone()
    return None if row is None else row[0]


@dataclass(frozen=True)
class _Entry(Generic[T]):
    static: T
    database: str
    xmax: str  # the build may have missed the changes of transactions >= xmax …
    running: list[str]  # … and of those running when it began
    built_at: float


class SchedulerCache(Generic[T]):
    """What ``build`` reads, kept while valid; one per worker process (the adapter,
    ``allocation``, holds it and says what to build); thread-safe."""

    def __init__(self, build: Callable[[], T], max_age_s: float = MAX_AGE_S) -> None:
        self.build, self.max_age_s = build, max_age_s
        self._entry: _Entry[T] | None = None
        self._lock = threading.Lock()
        self.hits = self.builds = 0

    def forget(self) -> None:
        self._entry = None

    def token(self) -> int | None:
        """Changes whenever what is held does (validated now); None when nothing is kept
        (SQLite, or not kept this time): then nothing derived from it should be."""
        if connection.vendor != "postgresql":
            return None
        static = self.get()
        entry = self._entry
        return id(entry) if entry is not None and entry.static is static else None

    def get(self) -> T:
        """What is held, validated against the database (rebuilt when in doubt)."""
        if connection.vendor != "postgresql":
            self.builds += 1
            return self.build()
        with self._lock:
            entry = self._entry
            if entry is not None and self._valid(entry):
                self.hits += 1
                return entry.static
            self._entry = None
            return self._rebuild()

    def _valid(self, entry: _Entry[T]) -> bool:
        if entry.database != connection.settings_dict["NAME"]:
            return False
        if time.monotonic() - entry.built_at > self.max_age_s:
            return False
        try:
            with transaction.atomic():
                return not _scalar(CHANGED_SINCE, (entry.xmax, entry.running))
        except DatabaseError:
            log.warning("scheduler cache: validation failed; rebuilding", exc_info=True)
            return False

    def _rebuild(self) -> T:
        self.builds += 1
        try:
            with transaction.atomic():
                with connection.cursor() as cur:
                    cur.execute(UNSEEN)
                    snap, own = cur.fetchone()
                _, xmax, running = snap.split(":")
                static = self.build()
                if not _scalar(CHANGED_HERE):  # else: this transaction may roll it back
                    # this transaction's own later changes are unseen as well
                    unseen = [x for x in running.split(",") if x] + ([own] if own else [])
                    self._entry = _Entry(static, connection.settings_dict["NAME"], xmax,
                                         unseen, time.monotonic())
                    with connection.cursor() as cur:
                        cur.execute(PRUNE)
            return static
        except DatabaseError:
            log.warning("scheduler cache: not kept (the change log is unreadable)",
                        exc_info=True)
            return self.build()
