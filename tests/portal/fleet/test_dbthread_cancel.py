"""The agent API's database threads never run the work of a request cancelled while it is
still queued (Django cancels the view when the client disconnects; asgiref then cancels
the executor's pending job). Checked while diagnosing the 10,000-node enrolment stall
(ADR 0140): under overload, a timed-out agent's queued work is dropped, not done late."""

from __future__ import annotations

import asyncio
import io
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.core.handlers.asgi import ASGIRequest

from portal.fleet.api import dbthread


def test_work_queued_for_a_cancelled_request_never_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pool = ThreadPoolExecutor(max_workers=1)
    monkeypatch.setattr(dbthread, "_executor", lambda: pool)
    release, ran = threading.Event(), []

    def busy() -> str:
        release.wait(5)
        return "busy"

    def work() -> str:
        ran.append("work")
        return "done"

    def request() -> ASGIRequest:  # as uvicorn hands it to Django
        return ASGIRequest({"type": "http", "method": "GET", "path": "/", "headers": [],
                            "query_string": b""}, io.BytesIO())

    async def main() -> tuple[str, str]:
        first = asyncio.create_task(dbthread.run_db(request(), busy))  # the only thread is busy
        await asyncio.sleep(0.05)
        abandoned = asyncio.create_task(dbthread.run_db(request(), work))  # queued behind it
        await asyncio.sleep(0.05)
        abandoned.cancel()  # the client gave up: Django cancels the view
        with pytest.raises(asyncio.CancelledError):
            await abandoned
        release.set()
        busy_result = await first
        later = await dbthread.run_db(request(), work)  # a live request still runs normally
        return busy_result, later

    assert asyncio.run(main()) == ("busy", "done")
    pool.shutdown(wait=True)
    assert ran == ["work"]  # only the live one
