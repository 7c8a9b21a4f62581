"""The desired-state long-poll never makes a cache (Redis) round trip in the event loop.

Regression (issue 12, 10,000 nodes): the rate-limit token was taken by a synchronous
Redis call inside the async view, so every long-poll (100 a second at 10,000 agents)
stalled its process's event loop — every other request of that process — for one round
trip; py-spy found 28 % of the web processes' event-loop time there. The token is now
taken by the request's first read, in a database thread."""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.core.handlers.asgi import ASGIRequest
from django.db import connection

from portal.fleet import services
from portal.fleet.api import dbthread, longpoll, throttle, views
from portal.inventory.models import Node
from tests.portal.fleet.conftest import AgentClient

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


def _asgi_get(node_id: str, credential: str, after: int) -> ASGIRequest:
    """The long-poll as uvicorn hands it to Django."""
    return ASGIRequest({"type": "http", "method": "GET",
                        "path": f"/api/agent/v1/nodes/{node_id}/desired-state",
                        "query_string": f"after_generation={after}&wait=0".encode(),
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
