"""The long-poll wake-up at 10,000 waiters in one process (portal/fleet/wakeup.py).

One notification wakes exactly the waiters of its key with one dict lookup (no scan of
every subscribed key), and a waiter whose listener is live sleeps its whole timeout: no
per-waiter polling, no per-waiter database work (a Subscription never touches the
database; the hub's one listener connection is shared).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from portal.fleet import wakeup

WAITERS = 10_000


class NoScan(dict[str, Any]):
    """A waiter table that refuses to be scanned: a wake-up for one key must look it up."""

    def items(self) -> Any:
        raise AssertionError("wake(key) scanned every subscribed key")

    def values(self) -> Any:
        raise AssertionError("wake(key) scanned every subscribed key")

    def __iter__(self) -> Any:
        raise AssertionError("wake(key) scanned every subscribed key")


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> wakeup._Hub:
    """A hub whose listener counts as live without a database (no thread is started)."""
    h = wakeup._Hub()
    monkeypatch.setattr(h, "_ensure_started", lambda: None)
    h._ready.set()
    return h


def test_wake_one_key_looks_it_up_without_scanning(hub: wakeup._Hub) -> None:
    async def run() -> None:
        subs = [wakeup.Subscription(hub, wakeup.node_key(i)) for i in range(WAITERS)]
        for sub in subs:
            hub.add(sub)
        table = NoScan(hub._waiters)
        hub._waiters = table
        hub.wake(wakeup.node_key(4321))
        await asyncio.sleep(0)
        assert [i for i, s in enumerate(subs) if s.event.is_set()] == [4321]

    asyncio.run(run())


def test_10000_waiters_sleep_until_woken_and_only_the_notified_wake(
        hub: wakeup._Hub) -> None:
    woken = list(range(0, WAITERS, 100))  # 100 of them get a notification

    async def run() -> tuple[list[bool], float, float]:
        subs = [wakeup.Subscription(hub, wakeup.node_key(i)) for i in range(WAITERS)]
        for sub in subs:
            hub.add(sub)
        assert hub.waiting() == WAITERS
        tasks = [asyncio.create_task(s.wait(30.0)) for s in subs]
        await asyncio.sleep(0.2)  # all waiting; none has returned (no polling step)
        assert not any(t.done() for t in tasks)
        t0 = time.perf_counter()
        for i in woken:
            hub.wake(wakeup.node_key(i))
        per_wake = (time.perf_counter() - t0) / len(woken)
        await asyncio.wait([tasks[i] for i in woken], timeout=10.0)
        done = [t.done() for t in tasks]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for sub in subs:
            hub.remove(sub)
        return done, per_wake, float(hub.waiting())

    done, per_wake, left = asyncio.run(run())
    assert [i for i, d in enumerate(done) if d] == woken
    print(f"{per_wake * 1e6:.1f} µs per wake-up with {WAITERS} waiters")  # no-scan: above
    assert left == 0 and hub._waiters == {}


def test_wake_all_reaches_every_waiter(hub: wakeup._Hub) -> None:
    async def run() -> int:
        subs = [wakeup.Subscription(hub, wakeup.node_key(i % 50)) for i in range(500)]
        for sub in subs:
            hub.add(sub)
        hub.wake(None)  # the listener (re)connected: everyone re-reads once
        await asyncio.sleep(0)
        return sum(s.event.is_set() for s in subs)

    assert asyncio.run(run()) == 500
