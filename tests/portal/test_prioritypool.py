"""``PriorityThreadPool``: urgent work is taken before routine work, a future cancelled
while queued never runs, and it behaves as an ``Executor`` otherwise."""

from __future__ import annotations

import asyncio
import threading

import pytest

from portal.core.prioritypool import PriorityThreadPool


def _busy(pool: PriorityThreadPool) -> threading.Event:
    """Occupy the pool's only thread until the returned event is set."""
    release, started = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        release.wait(5)

    pool.submit(hold)
    assert started.wait(5)
    return release


def test_urgent_work_overtakes_routine_work_queued_before_it() -> None:
    pool = PriorityThreadPool(max_workers=1)
    release = _busy(pool)
    order: list[str] = []
    routine = [pool.submit(order.append, f"heartbeat {i}") for i in range(3)]
    urgent = pool.submit_urgent(order.append, "converged")
    assert pool.queued() == (1, 3)
    release.set()
    for future in [*routine, urgent]:
        future.result(5)
    assert order == ["converged", "heartbeat 0", "heartbeat 1", "heartbeat 2"]
    pool.shutdown()


def test_a_future_cancelled_while_queued_never_runs() -> None:
    pool = PriorityThreadPool(max_workers=1)
    release = _busy(pool)
    ran: list[str] = []
    dropped = pool.submit_urgent(ran.append, "dropped")
    kept = pool.submit(ran.append, "kept")
    assert dropped.cancel()
    release.set()
    kept.result(5)
    assert ran == ["kept"]
    pool.shutdown()


def test_asyncio_cancels_the_queued_job_of_a_cancelled_awaiter() -> None:
    pool = PriorityThreadPool(max_workers=1)
    release = _busy(pool)
    ran: list[str] = []

    async def main() -> None:
        task = asyncio.ensure_future(asyncio.wrap_future(pool.submit(ran.append, "late")))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    release.set()
    pool.shutdown(wait=True)
    assert ran == []


def test_results_and_exceptions_reach_the_caller_and_threads_stay_bounded() -> None:
    pool = PriorityThreadPool(max_workers=3, thread_name_prefix="t")
    futures = [pool.submit(pow, 2, i) for i in range(50)]
    assert [f.result(5) for f in futures] == [2 ** i for i in range(50)]
    with pytest.raises(ZeroDivisionError):
        pool.submit_urgent(divmod, 1, 0).result(5)
    assert 1 <= len(pool._threads) <= 3
    pool.shutdown(wait=True)
    with pytest.raises(RuntimeError):
        pool.submit(print)
