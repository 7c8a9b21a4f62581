"""The agent API's database threads keep their connection between requests (ADR 0173)
and hand back the ones that are unusable, or held ``HOLD_S``, before the next use.

Regression: every report handed its pooled connection back and borrowed one again
(``close_old_connections`` twice per request, ≈ 0.3 ms of CPU per report)."""

from __future__ import annotations

import asyncio
import contextvars
import io
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.core.handlers.asgi import ASGIRequest
from django.db import connection

from portal.fleet.api import dbthread

pytestmark = pytest.mark.django_db(transaction=True)
REQUEST_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("request_var", default="-")


def _request() -> ASGIRequest:  # as uvicorn hands it to Django
    return ASGIRequest({"type": "http", "method": "POST", "path": "/", "headers": [],
                        "query_string": b""}, io.BytesIO())


def _backend() -> tuple[int, int]:
    """The Python connection object and the PostgreSQL backend this thread uses."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        pid = cur.fetchone()[0]
    return id(connection.connection), int(pid)


@pytest.fixture
def one_thread(monkeypatch: pytest.MonkeyPatch) -> Any:
    pool = ThreadPoolExecutor(max_workers=1)
    monkeypatch.setattr(dbthread, "_executor", lambda: pool)
    yield pool
    pool.submit(lambda: connection.close()).result()  # that thread's connection
    pool.shutdown(wait=True)


def _run(*calls: Any) -> list[Any]:
    async def main() -> list[Any]:
        return [await dbthread.run_db(_request(), fn) for fn in calls]
    return asyncio.run(main())


def test_a_report_thread_keeps_its_connection_between_requests(one_thread: Any) -> None:
    first, second = _run(_backend, _backend)
    assert first == second  # the same connection, not handed back and borrowed again


def test_a_broken_connection_is_replaced_before_the_next_use(one_thread: Any) -> None:
    def break_it() -> int:
        pid = _backend()[1]
        connection.errors_occurred = True
        connection.connection.close()  # as if PostgreSQL had restarted
        return pid

    broken_pid, (_, next_pid) = _run(break_it, _backend)
    assert next_pid != broken_pid


def test_a_connection_left_out_of_autocommit_is_not_reused(one_thread: Any) -> None:
    def leave_open() -> int:
        connection.set_autocommit(False)  # a bug that never restores autocommit
        return _backend()[1]

    left_pid, (_, next_pid) = _run(leave_open, _backend)
    assert next_pid != left_pid


def test_a_connection_held_too_long_goes_back(one_thread: Any,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    first = _run(_backend)[0]
    later = time.monotonic() + dbthread.HOLD_S + 1
    monkeypatch.setattr(dbthread.time, "monotonic", lambda: later)
    assert _run(_backend)[0][1] != first[1]


def test_the_work_runs_in_the_callers_context(one_thread: Any) -> None:
    async def main() -> str:
        REQUEST_VAR.set("report from gpu-node-01")
        return await dbthread.run_db(_request(), REQUEST_VAR.get)
    assert asyncio.run(main()) == "report from gpu-node-01"
