"""Where the agent API runs its database work.

Under ASGI, Django runs each request's sync code in a fresh thread, and a persistent
connection (``CONN_MAX_AGE`` > 0) opened there is never reused: at 100 reports/s this
exhausts PostgreSQL's connections. The agent API therefore runs its work in a small,
bounded pool of long-lived threads (``GPUPOOL_AGENT_DB_THREADS``, default 4 per server
process). Under WSGI (tests, ``live_server``) the work runs in the request's own thread.

Each thread **holds** its connection between requests (ADR 0173): with the psycopg pool
(``DB_POOL``, ADR 0006) Django hands a connection back at the end of every request and
borrows one at the start of the next, which cost ≈ 0.3 ms of CPU per report. A thread
checks its connections before every use as Django does around a request
(``keep_connections_usable``: a broken one, or one left out of autocommit, is
closed), and hands them back to the pool once they have been held
``HOLD_S`` seconds, so the pool still recycles and ages its connections.

The work is handed over in a copy of the caller's context (``contextvars``: the request
context reaches the services); cancelling the request before a thread takes its work
drops the work (``asyncio.wrap_future`` cancels the pending job), as asgiref's
``sync_to_async`` did at twice the CPU per hand-over.

**Urgent work first** (``portal.core.prioritypool``): the threads take ``urgent`` work
before routine work. Urgent is what a lease waits for: a long-poll's read after its
wake-up (new desired state on its way to the agent) and a report the agent marked
urgent with the standard ``Priority`` header (RFC 9218, ``u=0``–``u=2``: the report an
agent sends because its node converged). At 10,000 nodes these used to queue behind
the fleet's routine heartbeats. An agent can only move its own requests up, within its
rate limit.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor
from functools import cache
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.http import HttpRequest

from portal.core.prioritypool import PriorityThreadPool

T = TypeVar("T")
HOLD_S = 60.0  # a held connection goes back to the pool after this long
_held = threading.local()  # per thread: {alias: monotonic time the connection was first used}


URGENT_MAX = 2  # RFC 9218 urgency u=0..7 (default 3): at most this is urgent


@cache
def _executor() -> Executor:
    threads = int(getattr(settings, "GPUPOOL_AGENT_DB_THREADS", 4))
    return PriorityThreadPool(max_workers=threads, thread_name_prefix="agent-db")


def urgent(request: HttpRequest) -> bool:
    """Whether the request asks to be served first: ``Priority: u=N`` with N ≤ 2."""
    for item in request.headers.get("Priority", "").split(","):
        name, _, value = item.strip().partition("=")
        if name == "u":
            return value.strip().isdigit() and int(value) <= URGENT_MAX
    return False


def _unusable(conn: BaseDatabaseWrapper) -> bool:
    """What ``close_if_unusable_or_obsolete`` closes for, except age: a connection left
    out of autocommit (in a transaction), or broken by an error."""
    if conn.get_autocommit() != conn.settings_dict["AUTOCOMMIT"]:
        return True
    if conn.errors_occurred:
        if not conn.is_usable():
            return True
        conn.errors_occurred = False
    return False


def keep_connections_usable(now: float | None = None) -> None:
    """Before this thread's next use: close (hand back to the pool) each connection that
    is unusable or has been held ``HOLD_S``; keep the rest for this thread."""
    now = time.monotonic() if now is None else now
    since: dict[str, float] = getattr(_held, "since", None) or {}
    _held.since = since
    for conn in connections.all(initialized_only=True):
        if conn.connection is None:
            since.pop(conn.alias, None)
            continue
        if now - since.setdefault(conn.alias, now) >= HOLD_S or _unusable(conn):
            conn.close()
            since.pop(conn.alias, None)


def _note_opened() -> None:
    """Start the hold time of each connection this thread's work has just opened."""
    since: dict[str, float] = _held.since
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and conn.alias not in since:
            since[conn.alias] = time.monotonic()


def _checked(fn: Callable[..., T]) -> Callable[..., T]:
    def run(*args: Any, **kwargs: Any) -> T:
        keep_connections_usable()
        try:
            return fn(*args, **kwargs)
        finally:
            _note_opened()
    return run


async def run_db(request: HttpRequest, fn: Callable[..., T], *args: Any,
                 first: bool = False, **kwargs: Any) -> T:
    """Run ``fn`` in a database thread; ``first``: ahead of routine work."""
    if isinstance(request, ASGIRequest):
        work = functools.partial(contextvars.copy_context().run, _checked(fn), *args, **kwargs)
        pool = _executor()
        submit = getattr(pool, "submit_urgent", pool.submit) if first else pool.submit
        return await asyncio.wrap_future(submit(work))
    return await sync_to_async(fn, thread_sensitive=True)(*args, **kwargs)
