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

The held leases are kept by a second structure, ``LeaseBook`` (ADR 0165): brought up to
date on every use from a per-lease change log, re-reading only the leases it names. A
stale cache could only offer a node that is gone or keep one that came back out of a pass;
the allocation rows and their exclusion constraint stay the guard against double booking.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.db import DatabaseError, connection, transaction

log = logging.getLogger(__name__)

MAX_AGE_S = 300.0  # a safety net: the change log is what keeps it right

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


# The lease book (ADR 0165): which leases changed where this book's last read could not
# see, and which of them the asking transaction changed itself (uncommitted: read again
# next time, whatever becomes of it). A NULL lease is a TRUNCATE: read everything.
LEASE_CHANGES = ("SELECT DISTINCT lease_id, xid = pg_current_xact_id_if_assigned() "
                 "FROM leasing_leasechange WHERE xid >= %s::xid8 OR xid = ANY(%s::xid8[]) "
                 "OR xid = pg_current_xact_id_if_assigned()")
OWN_LEASE_CHANGES = ("SELECT DISTINCT lease_id FROM leasing_leasechange "
                     "WHERE xid = pg_current_xact_id_if_assigned()")
PRUNE_LEASE_CHANGES = "DELETE FROM leasing_leasechange WHERE created < now() - interval '1 day'"
BOOK_MAX_AGE_S = 300.0

V = TypeVar("V")


@dataclass
class _Book(Generic[V]):
    rows: dict[str, V]
    ordered: tuple[V, ...]
    database: str
    basis: object
    xmax: str
    running: list[str]
    pending: set[str]  # read from the reading transaction's own uncommitted changes
    built_at: float


class LeaseBook(Generic[V]):
    """The held leases, kept between passes and brought up to date from the change log
    (migration ``0006_leasebook_changelog``): each use re-reads only the leases changed
    since what its last read saw, in two indexed queries when nothing changed.

    ``read(ids, basis)`` returns the rows of those leases that still hold something
    (``None``: all of them), keyed by lease id; ``order`` sorts them. ``basis`` (what
    ``read`` translates with: GPU places, tenant slugs) is compared at every use: when it differs,
    everything is read again. So is it after ``max_age_s``, for another database, on any
    error, and elsewhere than PostgreSQL every time. One per worker process; thread-safe.
    """

    def __init__(self, read: Callable[[list[str] | None, Any], dict[str, V]],
                 order: Callable[[V], object], max_age_s: float = BOOK_MAX_AGE_S) -> None:
        self.read, self.order, self.max_age_s = read, order, max_age_s
        self._book: _Book[V] | None = None
        self._lock = threading.Lock()
        self.full_reads = self.updates = self.reread = 0

    def forget(self) -> None:
        self._book = None

    def held(self, basis: object) -> tuple[V, ...]:
        """Every held lease's row, as the caller's transaction sees them, in order."""
        if connection.vendor != "postgresql":
            self.full_reads += 1
            return self._sorted(self.read(None, basis))
        with self._lock:
            book = self._book
            try:
                with transaction.atomic():
                    if book is None or not self._usable(book, basis):
                        return self._read_all(basis).ordered
                    book.basis = basis  # equal: compared by identity next time
                    return self._update(book).ordered
            except DatabaseError:
                log.warning("lease book: not kept (the change log is unreadable)",
                            exc_info=True)
                self._book = None
                self.full_reads += 1
                return self._sorted(self.read(None, basis))

    def _usable(self, book: _Book[V], basis: object) -> bool:
        return (book.database == connection.settings_dict["NAME"]
                and time.monotonic() - book.built_at <= self.max_age_s
                and (book.basis is basis or book.basis == basis))

    def _sorted(self, rows: dict[str, V]) -> tuple[V, ...]:
        return tuple(sorted(rows.values(), key=self.order))

    def _unseen(self) -> tuple[str, list[str], str | None]:
        with connection.cursor() as cur:
            cur.execute(UNSEEN)
            snap, own = cur.fetchone()
        _, xmax, running = snap.split(":")
        return xmax, [x for x in running.split(",") if x], own

    def _read_all(self, basis: object) -> _Book[V]:
        self.full_reads += 1
        xmax, running, own = self._unseen()
        rows = self.read(None, basis)
        with connection.cursor() as cur:
            cur.execute(OWN_LEASE_CHANGES)
            pending = {str(lease) for (lease,) in cur.fetchall() if lease}
            cur.execute(PRUNE_LEASE_CHANGES)
        book = _Book(rows, self._sorted(rows), connection.settings_dict["NAME"], basis, xmax,
                     running + ([own] if own else []), pending, time.monotonic())
        self._book = book
        return book

    def _update(self, book: _Book[V]) -> _Book[V]:
        xmax, running, own = self._unseen()
        with connection.cursor() as cur:
            cur.execute(LEASE_CHANGES, (book.xmax, book.running))
            changes = cur.fetchall()
        if any(lease is None for lease, _ in changes):
            return self._read_all(book.basis)
        changed = {str(lease) for lease, _ in changes} | book.pending
        pending = {str(lease) for lease, mine in changes if mine}
        if changed:
            self.updates += 1
            self.reread += len(changed)
            fresh = self.read(sorted(changed), book.basis)
            rows = dict(book.rows)
            for lease in changed:
                rows.pop(lease, None)
            rows.update(fresh)
            book = _Book(rows, self._sorted(rows), book.database, book.basis, xmax,
                         running + ([own] if own else []), pending, book.built_at)
        else:
            book = _Book(book.rows, book.ordered, book.database, book.basis, xmax,
                         running + ([own] if own else []), pending, book.built_at)
        self._book = book
        return book
