"""The desired-state long-poll never makes a cache (Redis) round trip in the event loop.

Regression (issue 12, 10,000 nodes): the rate-limit token was taken by a synchronous
Redis call inside the async view, so every long-poll (100 a second at 10,000 agents)
stalled its process's event loop — every other request of that process — for one round
trip; py-spy found 28 % of the web processes' event-loop time there. The token is now
taken by the request's first read, in a database thread."""

from __future__ import annotations

import asyncio
import io
import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.core.handlers.asgi import ASGIRequest
from django.db import connection

from portal.core.prioritypool import PriorityThreadPool
from portal.fleet import services, wakeup
from portal.fleet.api import dbthread, longpoll, throttle, views
from portal.inventory.models import Node
from tests.portal.fleet.conftest import AgentClient
from tests.portal.fleet.helpers import report

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_hints() -> Iterator[None]:
    longpoll.KEYS.clear()
    yield
    longpoll.KEYS.clear()


@pytest.fixture(autouse=True)
def _db_thread(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A database thread of the test's own, its connection closed at the end."""
    pool = ThreadPoolExecutor(max_workers=1)
    monkeypatch.setattr(dbthread, "_executor", lambda: pool)
    yield
    pool.submit(lambda: connection.close()).result()
    pool.shutdown(wait=True)


def _asgi_get(node_id: str, credential: str, after: int, wait: int = 0) -> ASGIRequest:
    """The long-poll as uvicorn hands it to Django."""
    return ASGIRequest({"type": "http", "method": "GET",
                        "path": f"/api/agent/v1/nodes/{node_id}/desired-state",
                        "query_string": f"after_generation={after}&wait={wait}".encode(),
                        "headers": [(b"authorization", f"Bearer {credential}".encode())]},
                       io.BytesIO())


def _enrolled(client: AgentClient, hostname: str) -> None:
    """Enrolled, with a desired document to answer (generation 1 or more)."""
    assert client.enrol(hostname).status_code == 201
    node = Node.objects.get(agent__agent_id=client.node_id)
    services.node_desired_set(node=node, partitions=[], access_grants=[])


def _long_poll(client: AgentClient, after: int = -1) -> Any:
    request = _asgi_get(client.node_id, client.credential, after)
    return asyncio.run(views.desired_state(request, client.node_id))


@pytest.fixture
def takes(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Per token taken: whether the thread taking it was running an event loop."""
    seen: list[bool] = []
    real = throttle._take

    def spy(*args: Any) -> float:
        try:
            asyncio.get_running_loop()
            seen.append(True)
        except RuntimeError:
            seen.append(False)
        return real(*args)

    monkeypatch.setattr(throttle, "_take", spy)
    return seen


def test_long_poll_takes_its_rate_limit_token_outside_the_event_loop(
        agent_client: AgentClient, takes: list[bool]) -> None:
    _enrolled(agent_client, "gpu-node-61")
    takes.clear()
    for _ in range(2):  # the agent's first long-poll in this process (two reads), then one
        assert _long_poll(agent_client).status_code == 200
    assert takes == [False, False]  # one token per request, none in the event loop


def test_long_poll_over_its_rate_is_refused_before_any_read(
        agent_client: AgentClient, settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _enrolled(agent_client, "gpu-node-62")
    reads: list[str] = []
    real = longpoll.selectors.desired_document

    def counted(**kwargs: Any) -> Any:
        reads.append(threading.current_thread().name)
        return real(**kwargs)

    monkeypatch.setattr(longpoll.selectors, "desired_document", counted)
    settings.GPUPOOL_AGENT_RATE_LIMIT = {"rate_per_s": 0.01, "burst": 1}
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": "longpoll-event-loop"}}
    assert _long_poll(agent_client).status_code == 200
    assert len(reads) == 1  # a newer document: answered by the first read
    refused = _long_poll(agent_client)
    assert refused.status_code == 429 and refused["Retry-After"]
    assert len(reads) == 1  # refused before reading


# --- urgent work first (ADR 0174): what a lease waits for does not queue behind heartbeats


@pytest.mark.parametrize(("header", "expected"), [
    ("u=1", True), ("u=0, i", True), ("i, u=2", True), ("u=3", False), ("u=7", False),
    ("", False), ("u=x", False), ("u=-1", False), ("urgent", False)])
def test_priority_header_urgency(header: str, expected: bool) -> None:
    request = ASGIRequest({"type": "http", "method": "POST", "path": "/", "query_string": b"",
                           "headers": [(b"priority", header.encode())] if header else []},
                          io.BytesIO())
    assert dbthread.urgent(request) is expected


def _asgi_report(client: AgentClient, body: dict[str, Any], urgent: bool) -> ASGIRequest:
    data = json.dumps(body).encode()
    headers = [(b"authorization", f"Bearer {client.credential}".encode()),
               (b"content-type", b"application/json"),
               (b"content-length", str(len(data)).encode())]
    if urgent:
        headers.append((b"priority", b"u=1"))
    return ASGIRequest({"type": "http", "method": "POST",
                        "path": f"/api/agent/v1/nodes/{client.node_id}/reports",
                        "query_string": b"", "headers": headers}, io.BytesIO(data))


@pytest.mark.parametrize("urgent", [True, False])
def test_a_report_marked_urgent_is_served_before_queued_routine_work(
        agent_client: AgentClient, monkeypatch: pytest.MonkeyPatch, urgent: bool) -> None:
    _enrolled(agent_client, "gpu-node-63")
    pool = PriorityThreadPool(max_workers=1)
    monkeypatch.setattr(dbthread, "_executor", lambda: pool)
    order: list[str] = []
    release = threading.Event()

    async def main() -> int:
        busy = asyncio.ensure_future(dbthread.run_db(_ASGI_GET, release.wait, 5))
        await asyncio.sleep(0.05)  # the only thread is busy: what follows queues
        heartbeats = [asyncio.ensure_future(dbthread.run_db(_ASGI_GET, order.append, f"h{i}"))
                      for i in range(3)]
        await asyncio.sleep(0.01)
        sent = asyncio.ensure_future(views.reports(
            _asgi_report(agent_client, report(agent_client.node_id, 1), urgent),
            agent_client.node_id))
        await asyncio.sleep(0.05)
        release.set()
        await asyncio.gather(busy, *heartbeats)
        answer = await sent
        order.append("after")
        return int(answer.status_code)

    monkeypatch.setattr(views, "report_ingest", _recording(views.report_ingest, order))
    assert asyncio.run(main()) == 200
    pool.submit(lambda: connection.close()).result()
    pool.shutdown()
    if urgent:
        assert order[0] == "report", order  # ahead of the three queued heartbeats
    else:
        assert order.index("report") == 3, order  # first come, first served


def _recording(ingest: Any, order: list[str]) -> Any:
    def recorded(**kwargs: Any) -> Any:
        order.append("report")
        return ingest(**kwargs)
    return recorded


_ASGI_GET = ASGIRequest({"type": "http", "method": "GET", "path": "/", "headers": [],
                         "query_string": b""}, io.BytesIO())


@pytest.mark.services("postgres")
def test_a_long_poll_woken_by_new_desired_state_reads_ahead_of_routine_work(
        agent_client: AgentClient, monkeypatch: pytest.MonkeyPatch) -> None:
    _enrolled(agent_client, "gpu-node-64")
    node = Node.objects.get(agent__agent_id=agent_client.node_id)
    generation = node.desired.generation
    firsts: list[bool] = []
    real = longpoll.run_db

    async def spy(request: Any, fn: Any, *args: Any, first: bool = False) -> Any:
        firsts.append(first)
        return await real(request, fn, *args, first=first)

    monkeypatch.setattr(longpoll, "run_db", spy)

    async def main() -> int:
        request = _asgi_get(agent_client.node_id, agent_client.credential, generation, 10)
        waiting = asyncio.ensure_future(views.desired_state(request, agent_client.node_id))
        for _ in range(200):  # subscribed, listener live, first read done
            await asyncio.sleep(0.02)
            if len(firsts) >= 2 and wakeup.HUB.live():
                break
        await asyncio.to_thread(_push, node)
        return int((await waiting).status_code)

    assert asyncio.run(main()) == 200
    # learning the key and the subscribed read are routine; the read that found the new
    # document, after the wake-up, went first (the listener's own start also wakes
    # waiters once, to cover notifications sent before it listened)
    assert firsts[:2] == [False, False] and firsts[-1] is True, firsts


def _push(node: Node) -> None:
    services.node_desired_set(node=node, partitions=[], access_grants=[
        {"lease_id": "ls_9", "account": "lease-9", "gpu_indices": [0],
         "ssh_authorized_keys": []}])
    connection.close()
