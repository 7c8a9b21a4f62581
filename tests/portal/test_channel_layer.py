"""The demo's in-memory channel layer delivers sends that come from another thread.

Regression (test_channel_layer_send_from_worker_thread_wakes_receiver): in the demo, the
in-process Celery worker thread sent lease events into Channels' ``InMemoryChannelLayer``
while the WebSocket consumer waited on uvicorn's (uvloop) event loop; the wake-up was not
thread-safe, the loop stayed asleep and the browser test waited in vain for "active".
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import uvloop
from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer

from portal.core.channel_layer import ThreadSafeInMemoryChannelLayer


class ServerLoop:
    """An event loop in a thread of its own, like the ASGI server's."""

    def __init__(self) -> None:
        self.loop = uvloop.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Any, timeout: float = 5) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture
def server() -> Iterator[ServerLoop]:
    s = ServerLoop()
    yield s
    s.close()


def _deliveries(layer: InMemoryChannelLayer, server: ServerLoop, sends: int) -> int:
    """How many of ``sends`` group messages from this thread a waiting receiver got in 2 s."""
    channel = server.run(layer.new_channel())
    server.run(layer.group_add("tenant-1", channel))
    got: list[Any] = []

    async def receive_all() -> None:
        for _ in range(sends):
            got.append(await layer.receive(channel))

    waiting = asyncio.run_coroutine_threadsafe(receive_all(), server.loop)
    threading.Event().wait(0.2)  # the receiver is parked in receive()
    for i in range(sends):
        async_to_sync(layer.group_send)("tenant-1", {"type": "lease.event", "n": i})
    try:
        waiting.result(2)
    except TimeoutError:
        waiting.cancel()
    return len(got)


def test_channel_layer_send_from_worker_thread_wakes_receiver(server: ServerLoop) -> None:
    assert _deliveries(ThreadSafeInMemoryChannelLayer(), server, sends=3) == 3


def test_stock_in_memory_layer_is_what_failed(server: ServerLoop) -> None:
    """The harness can fail: Channels' own layer does not wake a receiver on another loop."""
    assert _deliveries(InMemoryChannelLayer(), server, sends=3) < 3


def test_same_loop_send_still_direct() -> None:
    layer = ThreadSafeInMemoryChannelLayer()

    async def roundtrip() -> Any:
        channel = await layer.new_channel()
        await layer.group_add("g", channel)
        await layer.group_send("g", {"type": "x", "v": 1})
        return await asyncio.wait_for(layer.receive(channel), 1)

    assert asyncio.run(roundtrip())["v"] == 1
