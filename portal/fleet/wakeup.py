"""Desired-state long-polls woken by events, not by re-reading the database.

Writers call :func:`notify_desired` inside the transaction that writes desired state:
PostgreSQL's ``NOTIFY`` is transactional (delivered on commit, dropped on rollback), so a
waiter never wakes for a change it cannot read yet. Each process runs ONE listener thread
with its own autocommit psycopg connection (``LISTEN gpupool_desired``) that fans each
notification out to the long-polls waiting for that key, whatever event loop they run
in (uvicorn's, or the per-request loops of a WSGI server).

A long-poll :func:`subscribe`\\ s *before* it reads the document, so a change committed
after its read always wakes it; while subscribed and the listener is live, an idle
long-poll costs one read per timeout. When the listener is down (connecting, lost, or not
PostgreSQL: the SQLite demo) waiters fall back to polling every ``fallback_step_s``, and
every (re)connection wakes all waiters once, covering notifications sent meanwhile.
``GPUPOOL_DESIRED_WAKEUP=poll`` turns the listener off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator
from typing import Any

from django.conf import settings
from django.db import connections

log = logging.getLogger("portal.fleet.wakeup")
CHANNEL = "gpupool_desired"
FABRIC_KEY = "fabric:default"
POSTGRES_FALLBACK_STEP_S = 0.5
SQLITE_STEP_S = 1.0
_LIBPQ_OPTIONS = ("sslmode", "sslrootcert", "sslcert", "sslkey", "connect_timeout",
                  "application_name", "target_session_attrs")


def node_key(node_pk: int | None) -> str:
    return f"node:{node_pk}"


def desired_key(role: str, node_pk: int | None) -> str:
    return FABRIC_KEY if role == "fabric" else node_key(node_pk)


def notify_desired(key: str) -> None:
    """Wake the long-polls for ``key`` when the current transaction commits."""
    if connections["default"].vendor == "postgresql":
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, key])


class Subscription:
    def __init__(self, hub: _Hub, key: str) -> None:
        self.hub, self.key = hub, key
        self.loop = asyncio.get_running_loop()
        self.event = asyncio.Event()

    def wake(self) -> None:  # from the listener thread
        with contextlib.suppress(RuntimeError):  # the request's loop already closed
            self.loop.call_soon_threadsafe(self.event.set)

    async def wait(self, timeout_s: float) -> bool:
        """True: read again (woken, or polling because the listener is not live).
        False: ``timeout_s`` passed with the listener live and nothing changed."""
        polling = not self.hub.live()
        step = min(timeout_s, self.hub.fallback_step_s) if polling else timeout_s
        try:
            await asyncio.wait_for(self.event.wait(), step)
        except TimeoutError:
            return polling
        self.event.clear()
        return True


class _Hub:
    """The process's listener thread and the waiters it fans out to."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[str, set[Subscription]] = {}
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.fallback_step_s = POSTGRES_FALLBACK_STEP_S

    def live(self) -> bool:
        return self._ready.is_set()

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def add(self, sub: Subscription) -> None:
        with self._lock:
            self._waiters.setdefault(sub.key, set()).add(sub)
        self._ensure_started()

    def remove(self, sub: Subscription) -> None:
        with self._lock:
            subs = self._waiters.get(sub.key, set())
            subs.discard(sub)
            if not subs:
                self._waiters.pop(sub.key, None)

    def wake(self, key: str | None) -> None:
        """Wake the waiters for ``key`` (all of them for ``None``): one dict lookup, so a
        notification costs the same with 10 or 10,000 long-polls waiting in this process."""
        with self._lock:
            if key is None:
                subs = [s for group in self._waiters.values() for s in group]
            else:
                subs = list(self._waiters.get(key, ()))
        for sub in subs:
            sub.wake()

    def waiting(self) -> int:
        """Long-polls subscribed in this process now."""
        with self._lock:
            return sum(len(group) for group in self._waiters.values())

    def _ensure_started(self) -> None:
        vendor = connections["default"].vendor
        if vendor != "postgresql" or _mode() == "poll":
            self.fallback_step_s = SQLITE_STEP_S if vendor == "sqlite" \
                else POSTGRES_FALLBACK_STEP_S
            return
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, args=(_conninfo(),),
                                            name="desired-wakeup", daemon=True)
            self._thread.start()

    def _run(self, conninfo: str) -> None:
        delay = 0.5
        while not self._stop.is_set():
            try:
                self._listen(conninfo)
                delay = 0.5
            except Exception as exc:  # lost or refused: fall back to polling, retry
                log.warning("desired-state listener down: %s", exc)
            finally:
                self._ready.clear()
            self.wake(None)
            self._stop.wait(delay)
            delay = min(delay * 2, 10.0)

    def _listen(self, conninfo: str) -> None:
        import psycopg

        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f"LISTEN {CHANNEL}")
            self._ready.set()
            self.wake(None)  # anything committed before LISTEN: waiters re-read once
            while not self._stop.is_set():
                for note in conn.notifies(timeout=1.0):
                    self.wake(note.payload)

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=5)
        self._thread = None


def _mode() -> str:
    return str(getattr(settings, "GPUPOOL_DESIRED_WAKEUP", "listen"))


def _conninfo() -> str:
    from psycopg.conninfo import make_conninfo

    s: dict[str, Any] = connections["default"].settings_dict
    extra = {k: v for k, v in (s.get("OPTIONS") or {}).items() if k in _LIBPQ_OPTIONS}
    params = {"dbname": s.get("NAME"), "user": s.get("USER"), "password": s.get("PASSWORD"),
              "host": s.get("HOST"), "port": s.get("PORT"), **extra}
    return make_conninfo("", **{k: str(v) for k, v in params.items() if v not in (None, "")})


HUB = _Hub()


@contextlib.asynccontextmanager
async def subscribe(key: str) -> AsyncIterator[Subscription]:
    """Register for ``key``'s notifications (before reading, so none is missed)."""
    sub = Subscription(HUB, key)
    HUB.add(sub)
    try:
        yield sub
    finally:
        HUB.remove(sub)


def stop() -> None:
    """Stop this process's listener (tests: before the test database is dropped)."""
    HUB.stop()
