"""The desired-state long-poll is woken by the desired-state change (PostgreSQL NOTIFY,
portal/fleet/wakeup.py), not by re-reading the database every half second."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import transaction
from django.db.backends import utils as db_utils

from agents.client.portal import PortalClient
from portal.fleet import selectors, services, wakeup
from portal.fleet.services.enrolment import bootstrap_token_create
from portal.inventory.models import Node

pytestmark = [pytest.mark.services("postgres"), pytest.mark.django_db(transaction=True)]


@pytest.fixture
def agent(live_server: Any) -> Iterator[tuple[PortalClient, Node]]:
    _, token = bootstrap_token_create(actor=None, hostname="gpu-node-31")
    client = PortalClient(live_server.url)
    client.enrol({"protocol": 1, "bootstrap_token": token, "role": "node",
                  "hostname": "gpu-node-31", "agent_version": "test"})
    yield client, Node.objects.get(hostname="gpu-node-31")
    client.close()


class Counter:
    """SQL statements run by any thread, and desired-document reads by the view."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.statements = self.reads = 0
        self._lock = threading.Lock()
        execute, read = db_utils.CursorWrapper.execute, selectors.desired_document

        def counted_execute(cursor: Any, sql: str, params: Any = None) -> Any:
            with self._lock:
                self.statements += 1
            return execute(cursor, sql, params)

        def counted_read(**kwargs: Any) -> Any:
            with self._lock:
                self.reads += 1
            return read(**kwargs)

        monkeypatch.setattr(db_utils.CursorWrapper, "execute", counted_execute)
        monkeypatch.setattr(selectors, "desired_document", counted_read)

    def reset(self) -> None:
        self.statements = self.reads = 0


def _set(node: Node, n: int) -> int:
    return services.node_desired_set(node=node, partitions=[], access_grants=[
        {"lease_id": f"ls_{n}", "account": f"lease-{n}", "gpu_indices": [0],
         "ssh_authorized_keys": []}])


def test_idle_long_poll_costs_at_most_one_query_per_timeout(
        agent: tuple[PortalClient, Node], monkeypatch: pytest.MonkeyPatch) -> None:
    client, node = agent
    gen = _set(node, 1)
    assert client.desired_state(gen, 1) is None  # starts this process's listener
    assert wakeup.HUB.live()
    count = Counter(monkeypatch)
    assert client.desired_state(gen, 0) is None
    per_request = count.statements  # authentication + the one read
    assert count.reads == 1
    count.reset()
    started = time.monotonic()
    assert client.desired_state(gen, 3) is None
    assert time.monotonic() - started >= 2.9
    assert count.reads == 1  # was one read every 0.5 s: 7 for a 3 s wait
    assert count.statements <= per_request


def test_desired_change_wakes_long_poll_within_200ms(agent: tuple[PortalClient, Node]) -> None:
    client, node = agent
    gen = _set(node, 0)
    client.desired_state(gen, 1)  # the listener is up
    latencies = []
    for n in range(1, 6):  # with a 0.5 s poll, 5 wake-ups under 200 ms would be ~1% luck
        done: dict[str, Any] = {}

        def poll(after: int = gen, out: dict[str, Any] = done) -> None:
            out["doc"] = client.desired_state(after, 10)
            out["at"] = time.monotonic()

        waiter = threading.Thread(target=poll)
        waiter.start()
        time.sleep(0.3)  # the long-poll is waiting
        gen = _set(node, n)
        committed = time.monotonic()
        waiter.join(5)
        assert done["doc"]["generation"] == gen
        latencies.append(done["at"] - committed)
    assert max(latencies) < 0.2, latencies


def test_rolled_back_change_wakes_nobody(agent: tuple[PortalClient, Node],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    client, node = agent
    gen = _set(node, 1)
    client.desired_state(gen, 1)
    count = Counter(monkeypatch)
    out: dict[str, Any] = {}
    waiter = threading.Thread(target=lambda: out.update(doc=client.desired_state(gen, 2)))
    waiter.start()
    time.sleep(0.3)
    with transaction.atomic():
        _set(node, 2)
        transaction.set_rollback(True)
    waiter.join(5)
    assert out["doc"] is None
    assert count.reads == 1  # NOTIFY is transactional: the rollback sent nothing


def test_long_poll_falls_back_to_polling_without_the_listener(
        agent: tuple[PortalClient, Node], settings: Any) -> None:
    settings.GPUPOOL_DESIRED_WAKEUP = "poll"
    client, node = agent
    gen = _set(node, 1)
    out: dict[str, Any] = {}
    waiter = threading.Thread(target=lambda: out.update(doc=client.desired_state(gen, 10),
                                                        at=time.monotonic()))
    waiter.start()
    time.sleep(0.3)
    gen = _set(node, 2)
    committed = time.monotonic()
    waiter.join(5)
    assert not wakeup.HUB.running()
    assert out["doc"]["generation"] == gen
    assert out["at"] - committed < wakeup.POSTGRES_FALLBACK_STEP_S + 0.3
