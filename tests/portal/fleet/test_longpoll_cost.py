"""Issue 12: an idle desired-state long-poll costs ONE database query per timeout (the
credential and the generation check in one SELECT, no write), and revocation, expiry and
another node's id still answer 401/403 on the very next request."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.backends import utils as db_utils
from django.test.utils import CaptureQueriesContext

from agents.client.portal import PortalClient
from portal.core import clock
from portal.fleet import services, wakeup
from portal.fleet.api import longpoll
from portal.fleet.models import Agent, AgentCredential
from portal.fleet.services.enrolment import bootstrap_token_create, credential_revoke
from portal.inventory.models import Node
from tests.portal.fleet.conftest import AgentClient

GRANT = {"lease_id": "ls_1", "account": "lease-1", "gpu_indices": [0],
         "ssh_authorized_keys": []}
WRITES = ("INSERT", "UPDATE", "DELETE")


def _set(node: Node, n: int) -> int:
    return services.node_desired_set(node=node, partitions=[], access_grants=[
        {**GRANT, "lease_id": f"ls_{n}", "account": f"lease-{n}"}])


def _node(client: AgentClient) -> Node:
    return Node.objects.get(agent__agent_id=client.node_id)


@pytest.fixture(autouse=True)
def _no_hints() -> Iterator[None]:
    longpoll.KEYS.clear()
    yield
    longpoll.KEYS.clear()


def _no_writes(queries: CaptureQueriesContext) -> bool:
    return not any(q["sql"].lstrip().upper().startswith(WRITES) for q in queries)


@pytest.mark.django_db
def test_long_poll_reads_document_and_credential_in_one_query(
        agent_client: AgentClient) -> None:
    assert agent_client.enrol("gpu-node-41").status_code == 201
    gen = _set(_node(agent_client), 1)
    with CaptureQueriesContext(connection) as first:
        assert agent_client.desired(after=gen).status_code == 204
    # an agent's first long-poll in a process learns its wake-up key, then reads subscribed
    assert len(first) == 2 and _no_writes(first), [q["sql"] for q in first]
    with CaptureQueriesContext(connection) as idle:
        assert agent_client.desired(after=gen).status_code == 204
    assert len(idle) == 1 and _no_writes(idle), [q["sql"] for q in idle]  # was 2
    assert idle[0]["sql"].lstrip().upper().startswith("SELECT")
    with CaptureQueriesContext(connection) as newer:
        resp = agent_client.desired(after=gen - 1)
    assert resp.status_code == 200 and resp.json()["generation"] == gen
    assert len(newer) == 1, [q["sql"] for q in newer]
    longpoll.KEYS.clear()
    with CaptureQueriesContext(connection) as cold_newer:
        assert agent_client.desired(after=0).json()["generation"] == gen
    assert len(cold_newer) == 1  # a newer document is answered by the first read


@pytest.mark.django_db
def test_revocation_and_expiry_take_effect_on_the_next_long_poll(
        agent_client: AgentClient, other_agent: AgentClient) -> None:
    assert agent_client.enrol("gpu-node-42").status_code == 201
    assert other_agent.enrol("gpu-node-43").status_code == 201
    gen = _set(_node(agent_client), 1)
    assert agent_client.desired(after=gen).status_code == 204  # its key is remembered
    assert other_agent.desired(after=0).status_code == 204
    stolen = agent_client.desired(after=0, node_id=other_agent.node_id)
    assert stolen.status_code == 403 and stolen.json()["error"]["code"] == "forbidden"
    AgentCredential.objects.filter(agent__agent_id=agent_client.node_id).update(
        valid_until=clock.now() - timedelta(seconds=1))
    expired = agent_client.desired(after=0)
    assert expired.status_code == 401 and expired.json()["error"]["code"] == "unauthenticated"
    credential_revoke(actor=None, agent=Agent.objects.get(agent_id=other_agent.node_id))
    assert other_agent.desired(after=0).status_code == 401
    assert agent_client.desired(after=0, credential="gpn_unknown").status_code == 401
    assert agent_client.desired(after=0, credential="").status_code == 401


@pytest.mark.django_db
def test_fabric_long_poll_gets_its_own_node_id_in_one_query(agent_client: AgentClient) -> None:
    assert agent_client.enrol("sm-41", role="fabric").status_code == 201
    gen = services.fabric_desired_set(partitions=[])
    agent_client.desired(after=gen)
    with CaptureQueriesContext(connection) as queries:
        resp = agent_client.desired(after=gen - 1)
    assert resp.status_code == 200 and resp.json()["node_id"] == agent_client.node_id
    assert len(queries) == 1


class Statements:
    """Every SQL statement any thread of this process runs (the live server's included)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sql: list[str] = []
        self._lock = threading.Lock()
        execute = db_utils.CursorWrapper.execute

        def counted(cursor: Any, sql: str, params: Any = None) -> Any:
            with self._lock:
                self.sql.append(sql)
            return execute(cursor, sql, params)

        monkeypatch.setattr(db_utils.CursorWrapper, "execute", counted)


@pytest.fixture
def live_agent(live_server: Any) -> Iterator[tuple[PortalClient, Node]]:
    _, token = bootstrap_token_create(actor=None, hostname="gpu-node-44")
    client = PortalClient(live_server.url)
    client.enrol({"protocol": 1, "bootstrap_token": token, "role": "node",
                  "hostname": "gpu-node-44", "agent_version": "test"})
    yield client, Node.objects.get(hostname="gpu-node-44")
    client.close()


@pytest.mark.services("postgres")
@pytest.mark.django_db(transaction=True)
def test_idle_long_poll_timeout_is_one_select(live_agent: tuple[PortalClient, Node],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    client, node = live_agent
    gen = _set(node, 1)
    assert client.desired_state(gen, 1) is None  # the listener is up, the key remembered
    assert wakeup.HUB.live()
    count = Statements(monkeypatch)
    started = time.monotonic()
    assert client.desired_state(gen, 2) is None
    assert time.monotonic() - started >= 1.9
    assert len(count.sql) == 1, count.sql  # was 2: the credential, then the document
    assert count.sql[0].lstrip().upper().startswith("SELECT")


@pytest.mark.services("postgres")
@pytest.mark.django_db(transaction=True)
def test_wrong_wakeup_hint_is_corrected_before_waiting(
        live_agent: tuple[PortalClient, Node]) -> None:
    client, node = live_agent
    gen = _set(node, 1)
    assert client.desired_state(gen, 1) is None
    assert wakeup.HUB.live()
    agent_id = node.agent.agent_id
    longpoll.KEYS[agent_id] = wakeup.node_key(node.pk + 10_000)  # a stale hint
    out: dict[str, Any] = {}
    waiter = threading.Thread(target=lambda: out.update(doc=client.desired_state(gen, 10),
                                                        at=time.monotonic()))
    waiter.start()
    time.sleep(0.5)  # waiting, subscribed to the right key
    gen = _set(node, 2)
    committed = time.monotonic()
    waiter.join(5)
    assert out["doc"]["generation"] == gen
    assert out["at"] - committed < 1.0
    assert longpoll.KEYS[agent_id] == wakeup.node_key(node.pk)


@pytest.mark.django_db
def test_long_poll_read_compiles_no_query(agent_client: AgentClient,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The read is one prebuilt statement: at 10,000 agents compiling the ORM query per
    long-poll was a fifth of the web tier's CPU (py-spy, 2026-12-01)."""
    from django.db.models.sql.compiler import SQLCompiler

    assert agent_client.enrol("gpu-node-44").status_code == 201
    gen = _set(_node(agent_client), 1)
    agent_client.desired(after=gen)  # the wake-up key is learnt
    compiled: list[str] = []
    as_sql = SQLCompiler.as_sql

    def counting(self: SQLCompiler, *args: Any, **kwargs: Any) -> Any:
        compiled.append(type(self.query.model).__name__)
        return as_sql(self, *args, **kwargs)

    monkeypatch.setattr(SQLCompiler, "as_sql", counting)
    assert agent_client.desired(after=gen).status_code == 204
    resp = agent_client.desired(after=gen - 1)
    assert resp.status_code == 200 and resp.json()["generation"] == gen
    assert compiled == []
