"""The lease page's WebSocket: the page's tenant gate, on connect and on every message."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser

from portal.fleet.models import GpuTelemetry
from portal.leasing.models import Allocation
from portal.tenants.models import Membership
from portal.web import consumers
from portal.web.routing import websocket_urlpatterns
from tests.portal.web.conftest import active_lease, order

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fast_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(consumers, "POLL_SECONDS", 0.05)


def communicator(user: Any, lease_id: Any) -> WebsocketCommunicator:
    comm = WebsocketCommunicator(URLRouter(websocket_urlpatterns), f"/ws/leases/{lease_id}/")
    comm.scope["user"] = user
    return comm


async def _closed_with(comm: WebsocketCommunicator) -> int | None:
    connected, _ = await comm.connect()
    assert connected  # accepted, then closed with a reason the page understands
    out = await comm.receive_output(timeout=10)
    await comm.wait()
    return out.get("code") if out["type"] == "websocket.close" else None


def test_other_tenants_lease_socket_is_closed(pool: dict[str, Any]) -> None:
    lease = order(pool, who="bob", tenant="b")
    assert async_to_sync(_closed_with)(communicator(pool["alice"], lease.pk)) == 4404


def test_anonymous_and_unknown_lease_sockets_are_closed(pool: dict[str, Any]) -> None:
    lease = order(pool)
    assert async_to_sync(_closed_with)(communicator(AnonymousUser(), lease.pk)) == 4404
    unknown = "00000000-0000-0000-0000-000000000000"
    assert async_to_sync(_closed_with)(communicator(pool["alice"], unknown)) == 4404


def test_own_lease_streams_telemetry_and_state_and_stops_when_access_ends(
        pool: dict[str, Any]) -> None:
    lease = active_lease(pool)
    alloc = Allocation.objects.filter(lease=lease).select_related("gpu").first()
    GpuTelemetry.objects.create(node_id=alloc.node_id, index=alloc.gpu.index, uuid=alloc.gpu.uuid,
                                ts=lease.start_at, data={"gpu_util_pct": 42, "power_w": 300.5,
                                                         "memory_used_bytes": 1, "memory_total_bytes": 4})
    other = order(pool, gpu_count=1, name="other")

    async def scenario() -> None:
        comm = communicator(pool["alice"], lease.pk)
        connected, _ = await comm.connect()
        assert connected
        first = await comm.receive_json_from(timeout=10)
        assert first == {"type": "lease", "lease_id": str(lease.pk), "state": "active",
                         "event": {}}
        msg = await comm.receive_json_from(timeout=10)
        assert msg["type"] == "telemetry"
        assert len(msg["gpus"]) == 8
        sample = next(g for g in msg["gpus"] if g["uuid"] == alloc.gpu.uuid)
        assert sample["util"] == 42 and sample["power"] == 300.5 and sample["mem"] == 25.0
        layer = get_channel_layer()
        # an event for another lease of the tenant is not forwarded; this lease's is
        await layer.group_send(f"tenant-{pool['a'].pk}", {
            "type": "lease.event", "lease_id": str(other.pk), "state": "queued", "event": {}})
        await layer.group_send(f"tenant-{pool['a'].pk}", {
            "type": "lease.event", "lease_id": str(lease.pk), "state": "active",
            "event": {"to_state": "active"}})
        for _ in range(20):
            msg = await comm.receive_json_from(timeout=10)
            if msg["type"] == "lease":
                break
        assert msg["lease_id"] == str(lease.pk)
        assert msg["event"] == {"to_state": "active"}
        # membership removed: the next message is a close, not data
        await database_sync_to_async(
            Membership.objects.filter(user=pool["alice"], tenant=pool["a"]).delete)()
        for _ in range(40):
            out = await comm.receive_output(timeout=10)
            if out["type"] == "websocket.close":
                break
        assert out == {"type": "websocket.close", "code": 4404}
        await comm.disconnect()

    async_to_sync(scenario)()


def test_state_change_is_pushed_without_a_group_message(pool: dict[str, Any]) -> None:
    lease = order(pool, gpu_count=1)

    async def scenario() -> None:
        comm = communicator(pool["alice"], lease.pk)
        connected, _ = await comm.connect()
        assert connected
        assert (await comm.receive_json_from(timeout=10))["state"] == "queued"
        from tests.portal.web.conftest import drive

        await database_sync_to_async(drive)()
        for _ in range(40):
            msg = await comm.receive_json_from(timeout=10)
            if msg["type"] == "lease":
                break
        assert msg["state"] == "active"
        await comm.disconnect()
        await asyncio.sleep(0)

    async_to_sync(scenario)()


def test_foreign_origin_is_refused(pool: dict[str, Any]) -> None:
    from portal.asgi import application

    lease = order(pool)

    async def scenario() -> tuple[bool, Any]:
        comm = WebsocketCommunicator(application, f"/ws/leases/{lease.pk}/",
                                     headers=[(b"origin", b"https://evil.example"),
                                              (b"host", b"127.0.0.1")])
        connected, code = await comm.connect()
        await comm.disconnect()
        return connected, code

    connected, _ = async_to_sync(scenario)()
    assert connected is False


def test_a_failed_poll_keeps_the_socket(pool: dict[str, Any],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from portal.web import live

    lease = active_lease(pool)
    real = live.lease_telemetry
    calls = {"n": 0}

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("database went away")
        return real(*args, **kwargs)

    monkeypatch.setattr(live, "lease_telemetry", flaky)

    async def scenario() -> None:
        comm = communicator(pool["alice"], lease.pk)
        assert (await comm.connect())[0]
        assert (await comm.receive_json_from(timeout=10))["type"] == "lease"
        assert (await comm.receive_json_from(timeout=10))["type"] == "telemetry"
        await comm.disconnect()

    async_to_sync(scenario)()
    assert calls["n"] >= 2
