"""Where the agent API runs its database work.

Under ASGI, Django runs each request's sync code in a fresh thread, and a persistent
connection (``CONN_MAX_AGE`` > 0) opened there is never reused: at 100 reports/s this
exhausts PostgreSQL's connections. The agent API therefore runs its work in a small,
bounded pool of long-lived threads (``GPUPOOL_AGENT_DB_THREADS``, default 4 per server
process). Each checks its connection (``close_old_connections``) before and after every
use, as Django does around a request: with the psycopg pool (``DB_POOL``, ADR 0006) that
borrows a pooled connection and hands it back; with ``CONN_MAX_AGE`` > 0 the thread keeps
its own. Under WSGI (tests, ``live_server``) the work runs in the request's own thread.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.db import close_old_connections
from django.http import HttpRequest

T = TypeVar("T")


@cache
def _executor() -> ThreadPoolExecutor:
    threads = int(getattr(settings, "GPUPOOL_AGENT_DB_THREADS", 4))
    return ThreadPoolExecutor(max_workers=threads, thread_name_prefix="agent-db")


def _checked(fn: Callable[..., T]) -> Callable[..., T]:
    def run(*args: Any, **kwargs: Any) -> T:
        close_old_connections()
        try:
            return fn(*args, **kwargs)
        finally:
            # As at the end of a request: with CONN_MAX_AGE = 0 this hands a pooled
            # connection back to the pool (or closes an unpooled one) between reports.
            close_old_connections()
    return run


async def run_db(request: HttpRequest, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    if isinstance(request, ASGIRequest):
        call = sync_to_async(_checked(fn), thread_sensitive=False, executor=_executor())
    else:
        call = sync_to_async(fn, thread_sensitive=True)
    return await call(*args, **kwargs)
