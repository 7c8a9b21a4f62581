"""The lease page's charts open with recent history (page and first socket message), only of
this lease's GPUs and ports and only since this lease became active."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from portal.core import clock
from portal.fleet.models import GpuTelemetry, PortTelemetry, TelemetrySample
from portal.inventory.models import Node
from portal.leasing.models import Allocation, Lease
from portal.web import consumers, live
from portal.web.routing import websocket_urlpatterns
from tests.portal.web.conftest import active_lease, client_for, drive, order
from tests.portal.web.test_queries import LEASE_MAX

BEFORE = 99  # utilisation written in the minutes before the lease (another tenant's work)
MIN = timedelta(minutes=1)


def _history(node: Node, start: datetime, minutes: int, *, gpus: range = range(8)) -> None:
    """Per-minute samples from ``start``: GPUs (util = BEFORE before the lease, else the
    minute of the hour) and one port; the same table the fleet's report ingestion writes."""
    rows = []
    for m in range(minutes):
        minute = start + m * MIN
        rows += [TelemetrySample(node=node, kind="gpu", key=str(i), minute=minute,
                                 values={"gpu_util_pct": minute.minute, "temperature_c": 50,
                                         "power_w": 300.0, "memory_used_bytes": 1,
                                         "memory_total_bytes": 4}) for i in gpus]
        rows.append(TelemetrySample(node=node, kind="port", key="mlx5_0:1", minute=minute,
                                    values={"port_xmit_bytes_per_s": 1.25e9,
                                            "port_rcv_bytes_per_s": 2.5e8}))
    TelemetrySample.objects.bulk_create(rows)


def _latest(node: Node) -> None:
    for i in range(8):
        GpuTelemetry.objects.create(node=node, index=i, ts=clock.now(),
                                    data={"gpu_util_pct": 50, "temperature_c": 60})
    PortTelemetry.objects.create(node=node, device="mlx5_0", port=1, ts=clock.now(), state_id=4,
                                 data={"rates_per_s": {"port_xmit_bytes": 1e9}})


@pytest.fixture
def leased(pool: dict[str, Any]) -> dict[str, Any]:
    """Alice's 4-GPU lease, active at 09:00 and now 45 minutes old; per-minute history of
    its whole node since 08:40 (all 8 GPUs; before 09:00 someone else's work)."""
    lease = active_lease(pool, gpu_count=4)
    assert lease.active_at == clock.now()
    held = Allocation.objects.filter(lease=lease, live=True).select_related("node", "gpu")
    node = held[0].node
    indices = {a.gpu.index for a in held}
    start = lease.active_at - 20 * MIN
    _history(node, start, 20, gpus=range(8))  # 08:40–08:59, util BEFORE
    TelemetrySample.objects.filter(minute__lt=lease.active_at).update(
        values={"gpu_util_pct": BEFORE, "memory_used_bytes": 3, "memory_total_bytes": 4})
    _history(node, lease.active_at, 45)  # 09:00–09:44
    clock.advance(45 * MIN)
    _latest(node)
    return {"lease": lease, "node": node, "indices": indices, **pool}


def _initial(response: Any) -> dict[str, Any]:
    found = re.search(r'<script id="chart-initial" type="application/json">(.*?)</script>',
                      response.content.decode(), re.S)
    assert found, "the page carries no chart data"
    data: dict[str, Any] = json.loads(found.group(1))
    return data


def _check(history: dict[str, Any], leased: dict[str, Any], *, first: datetime,
           points: int) -> None:
    host = leased["node"].hostname
    assert history["minutes"] == live.HISTORY_MINUTES
    assert [g["key"] for g in history["gpus"]] == [f"{host}/{i}"
                                                  for i in sorted(leased["indices"])]
    for g in history["gpus"]:
        assert len(g["t"]) == points == len(g["util"])
        assert g["t"][0] == int(first.timestamp())
        assert g["t"] == sorted(g["t"])
        assert BEFORE not in g["util"] and 75.0 not in g["mem"]
        assert g["util"][-1] == 44 and g["mem"][-1] == 25.0 and g["power"][-1] == 300.0
    [port] = history["ports"]
    assert port["key"] == f"{host}/mlx5_0:1"
    assert len(port["t"]) == points and port["tx"][0] == 10.0 and port["rx"][0] == 2.0


def test_lease_page_opens_with_the_last_30_minutes(leased: dict[str, Any]) -> None:
    lease = leased["lease"]
    response = client_for(leased["alice"]).get(reverse("web:lease",
                                                       kwargs={"lease_id": lease.pk}))
    assert response.status_code == 200
    data = _initial(response)
    assert data["type"] == "telemetry" and len(data["gpus"]) == 4 and len(data["ports"]) == 1
    # 09:15–09:44: thirty minutes, ending at the latest stored minute
    _check(data["history"], leased, first=lease.active_at + 15 * MIN, points=30)


def test_history_never_reaches_before_the_lease(leased: dict[str, Any]) -> None:
    lease = leased["lease"]
    gpus = live.lease_gpus(lease)
    telemetry = live.lease_telemetry(lease, gpus)
    history = live.lease_history(lease, gpus, telemetry, minutes=10_000)
    assert history["minutes"] == live.HISTORY_MAX_MINUTES
    for series in history["gpus"] + history["ports"]:
        # 09:00–09:44 only: the 20 minutes before the lease (util 99) are not there
        assert series["t"][0] == int(lease.active_at.timestamp()) and len(series["t"]) == 45
        assert BEFORE not in series.get("util", [])
    # a GPU allocated to the lease later than its activation: history from then on only
    Allocation.objects.filter(lease=lease).update(start_at=lease.active_at + 40 * MIN)
    history = live.lease_history(lease, live.lease_gpus(lease), telemetry)
    assert {len(s["t"]) for s in history["gpus"] + history["ports"]} == {5}


def test_a_lease_not_active_yet_has_no_history(pool: dict[str, Any]) -> None:
    lease = order(pool, gpu_count=2, start_at=clock.now() + timedelta(hours=1))
    drive()
    lease.refresh_from_db()
    assert lease.active_at is None
    node = Node.objects.filter(allocations__lease=lease).first()
    if node is not None:
        _history(node, clock.now() - 10 * MIN, 10)
    gpus = live.lease_gpus(lease)
    history = live.lease_history(lease, gpus, live.lease_telemetry(lease, gpus))
    assert history["gpus"] == [] and history["ports"] == []


def test_other_tenant_gets_404(leased: dict[str, Any]) -> None:
    url = reverse("web:lease", kwargs={"lease_id": leased["lease"].pk})
    response = client_for(leased["bob"]).get(url)
    assert response.status_code == 404
    assert b"chart-initial" not in response.content


def test_lease_page_queries_do_not_grow_with_history(pool: dict[str, Any]) -> None:
    """Two 8-GPU leases on a busy fleet with 30 minutes of history on every node."""
    first = order(pool, name="run-1")
    order(pool, name="run-2")
    drive()
    first.refresh_from_db()
    assert first.state == "active"
    clock.advance(30 * MIN)
    for node in Node.objects.all():
        _latest(node)
    Lease.objects.bulk_create(
        [Lease(tenant=pool["a"], created_by=pool["alice"], name=f"old-{i}",
               allowed_models=["H100"], gpu_model="H100", gpu_count=2, state="ended",
               start_at=clock.now() - timedelta(days=i + 2),
               end_at=clock.now() - timedelta(days=i + 1)) for i in range(30)])
    alice = client_for(pool["alice"])
    url = reverse("web:lease", kwargs={"lease_id": first.pk})
    counts = []
    for minutes in (1, 30):
        TelemetrySample.objects.all().delete()
        for node in Node.objects.all():
            _history(node, first.active_at + (30 - minutes) * MIN, minutes)
        with CaptureQueriesContext(connection) as queries:
            response = alice.get(url)
        assert response.status_code == 200
        gpus = _initial(response)["history"]["gpus"]
        assert len(gpus) == 8 and {len(g["t"]) for g in gpus} == {minutes}
        counts.append(len(queries))
    assert counts[0] == counts[1] <= LEASE_MAX


def test_lease_page_query_budget_with_history(pool: dict[str, Any], alice: Client,
                                              django_assert_max_num_queries: Any) -> None:
    lease = active_lease(pool)
    clock.advance(30 * MIN)
    for node in Node.objects.filter(allocations__lease=lease).distinct():
        _latest(node)
        _history(node, lease.active_at, 30)
    with django_assert_max_num_queries(LEASE_MAX):
        response = alice.get(reverse("web:lease", kwargs={"lease_id": lease.pk}))
    assert len(_initial(response)["history"]["gpus"]) == 8


# --- the socket ---------------------------------------------------------------------------

def _communicator(user: Any, lease_id: Any) -> WebsocketCommunicator:
    comm = WebsocketCommunicator(URLRouter(websocket_urlpatterns), f"/ws/leases/{lease_id}/")
    comm.scope["user"] = user
    return comm


@pytest.mark.django_db(transaction=True)
def test_first_socket_message_carries_history_then_only_live(
        leased: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(consumers, "POLL_SECONDS", 0.05)
    lease = leased["lease"]

    async def scenario() -> list[dict[str, Any]]:
        comm = _communicator(leased["alice"], lease.pk)
        assert (await comm.connect())[0]
        assert (await comm.receive_json_from(timeout=10))["type"] == "lease"
        got = [await comm.receive_json_from(timeout=10) for _ in range(2)]
        await comm.disconnect()
        return got

    first, second = async_to_sync(scenario)()
    assert first["type"] == second["type"] == "telemetry"
    _check(first["history"], leased, first=lease.active_at + 15 * MIN, points=30)
    assert "history" not in second and len(second["gpus"]) == 4


@pytest.mark.django_db(transaction=True)
def test_other_tenants_socket_is_closed(leased: dict[str, Any]) -> None:
    async def scenario() -> Any:
        comm = _communicator(leased["bob"], leased["lease"].pk)
        assert (await comm.connect())[0]
        out = await comm.receive_output(timeout=10)
        await comm.wait()
        return out

    assert async_to_sync(scenario)() == {"type": "websocket.close", "code": 4404}


def test_selector_reads_only_the_asked_gpus_and_minutes(leased: dict[str, Any]) -> None:
    from portal.fleet.selectors import telemetry_history

    node, since = leased["node"], leased["lease"].active_at + 40 * MIN
    index = min(leased["indices"])
    rows = telemetry_history(gpus=[(node.pk, index, since)], nodes=[], until=clock.now())
    assert [(r["kind"], r["key"]) for r in rows] == [("gpu", str(index))] * 5
    assert rows[0]["minute"] == since
    assert telemetry_history(gpus=[], nodes=[], until=clock.now()) == []


def test_live_view_hides_the_previous_holders_sample(pool: dict[str, Any]) -> None:
    """Regression: the live view showed each GPU's latest sample whenever it was taken; if
    the agent's last report predates this lease, that reading is the previous tenant's."""
    lease = active_lease(pool, gpu_count=4)
    node = Allocation.objects.filter(lease=lease).first().node  # type: ignore[union-attr]
    before = lease.active_at - MIN  # type: ignore[operator]
    for i in range(8):
        GpuTelemetry.objects.update_or_create(node=node, index=i, defaults={
            "ts": before, "data": {"gpu_util_pct": BEFORE}})
    PortTelemetry.objects.update_or_create(node=node, device="mlx5_0", port=1, defaults={
        "ts": before, "state_id": 4, "data": {"rates_per_s": {"port_xmit_bytes": 1e9}}})
    stale = live.lease_telemetry(lease)
    assert [g["util"] for g in stale["gpus"]] == [None] * 4
    assert stale["ports"] == []
    GpuTelemetry.objects.filter(node=node).update(ts=clock.now())
    PortTelemetry.objects.filter(node=node).update(ts=clock.now())
    fresh = live.lease_telemetry(lease)
    assert [g["util"] for g in fresh["gpus"]] == [BEFORE] * 4
    assert len(fresh["ports"]) == 1
