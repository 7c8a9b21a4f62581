"""The in-process channel layer of the demo, safe to send to from any thread.

Without Redis the demo runs its Celery worker in a thread beside the ASGI server (see
``inprocess.py``), so lease events are sent from that thread while the WebSocket consumers
wait on the server's event loop. Channels' ``InMemoryChannelLayer`` keeps an ``asyncio.Queue``
per channel; putting into it from another thread wakes the waiting consumer with a
non-thread-safe ``call_soon`` on the server's loop. Under uvloop that can leave the loop
asleep or wedged, and a lease page then never hears that its lease became active.

This layer remembers the loop its receivers run on and hands sends that come from another
loop to it with ``run_coroutine_threadsafe``. Production uses the Redis layer, which has no
such problem; this one is only for the single-process demo.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from channels.layers import InMemoryChannelLayer

log = logging.getLogger(__name__)
HANDOFF_TIMEOUT_S = 5.0


class ThreadSafeInMemoryChannelLayer(InMemoryChannelLayer):  # type: ignore[misc]
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._receiver_loop: asyncio.AbstractEventLoop | None = None

    async def receive(self, channel: str) -> Any:
        self._receiver_loop = asyncio.get_running_loop()
        return await super().receive(channel)

    def _foreign_loop(self) -> asyncio.AbstractEventLoop | None:
        """The receivers' loop when it is running and is not the caller's, else None."""
        loop = self._receiver_loop
        if loop is None or loop is asyncio.get_running_loop() or not loop.is_running():
            return None
        return loop

    async def _on(self, loop: asyncio.AbstractEventLoop, what: str, coro: Any) -> None:
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            await asyncio.wait_for(asyncio.wrap_future(future), HANDOFF_TIMEOUT_S)
        except TimeoutError:
            future.cancel()
            log.warning("channel layer: %s not delivered within %.0fs", what,
                        HANDOFF_TIMEOUT_S)

    async def send(self, channel: str, message: dict[str, Any]) -> None:
        loop = self._foreign_loop()
        if loop is None:
            await super().send(channel, message)
        else:
            await self._on(loop, f"send to {channel}", super().send(channel, message))

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        loop = self._foreign_loop()
        if loop is None:
            await super().group_send(group, message)
        else:
            await self._on(loop, f"group send to {group}", super().group_send(group, message))
