"""WebSocket for the lease page: state changes and live telemetry, tenant-checked each time.

The socket is accepted only for a signed-in user who may see the lease (the same gate as
the page: ``lease_get``). Every message sent re-runs that check; losing access closes the
socket with 4404. Origins are checked by ``AllowedHostsOriginValidator`` in asgi.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from portal.core.errors import ApplicationError
from portal.leasing import states
from portal.web import live

log = logging.getLogger(__name__)
POLL_SECONDS = 2.0
CLOSE_NOT_FOUND = 4404
CLOSE_SIGNED_OUT = 4403
HOLDING = states.HOLDING


def _visible_lease(user: Any, lease_id: str) -> Any:
    from portal.leasing.selectors import lease_get

    if user is None or not user.is_authenticated or not user.is_active:
        return None
    try:
        return lease_get(user=user, lease_id=lease_id)
    except ApplicationError:
        return None


def _snapshot(user: Any, lease_id: str, history: bool = False) -> dict[str, Any] | None:
    """Current state and telemetry (with the charts' recent history when ``history``), or
    None when the user may no longer see the lease."""
    lease = _visible_lease(user, lease_id)
    if lease is None:
        return None
    telemetry: dict[str, Any] = {"gpus": [], "ports": []}
    if lease.state in HOLDING:
        gpus = live.lease_gpus(lease)
        telemetry = live.lease_telemetry(lease, gpus)
        if history:
            telemetry = {**telemetry, "history": live.lease_history(lease, gpus, telemetry)}
    return {"state": lease.state, "telemetry": telemetry}


class LeaseConsumer(AsyncJsonWebsocketConsumer):
    lease_id: str = ""
    group: str = ""
    state: str = ""
    poller: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        lease_id = str(self.scope["url_route"]["kwargs"]["lease_id"])
        lease = await database_sync_to_async(_visible_lease)(user, lease_id)
        await self.accept()
        if lease is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.lease_id, self.state = str(lease.pk), lease.state
        self.group = f"tenant-{lease.tenant_id}"
        await self.channel_layer.group_add(self.group, self.channel_name)
        # The page may have been rendered before the latest change: say where things are.
        await self.send_json({"type": "lease", "lease_id": self.lease_id, "state": self.state,
                              "event": {}})
        self.poller = asyncio.ensure_future(self._poll())

    async def disconnect(self, code: int) -> None:
        if self.poller is not None:
            self.poller.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.poller
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """The page sends nothing; ignore anything it does."""

    async def _poll(self) -> None:
        history = True  # the first telemetry of the lease's GPUs carries their recent history
        while True:
            try:
                snap = await database_sync_to_async(_snapshot)(self.scope.get("user"),
                                                               self.lease_id, history)
            except Exception:  # a database hiccup: keep the socket, try again next tick
                log.exception("lease %s: telemetry poll failed", self.lease_id)
                await asyncio.sleep(POLL_SECONDS)
                continue
            if snap is None:
                await self.close(code=CLOSE_NOT_FOUND)
                return
            if snap["state"] != self.state:
                self.state = snap["state"]
                await self.send_json({"type": "lease", "lease_id": self.lease_id,
                                      "state": self.state, "event": {}})
            await self.send_json({"type": "telemetry", **snap["telemetry"]})
            history = history and "history" not in snap["telemetry"]
            await asyncio.sleep(POLL_SECONDS)

    async def lease_event(self, message: dict[str, Any]) -> None:
        """A lease of this tenant changed (group message from the leasing app)."""
        if str(message.get("lease_id")) != self.lease_id:
            return
        lease = await database_sync_to_async(_visible_lease)(self.scope.get("user"),
                                                             self.lease_id)
        if lease is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.state = lease.state
        await self.send_json({"type": "lease", "lease_id": self.lease_id, "state": lease.state,
                              "event": message.get("event") or {}})
