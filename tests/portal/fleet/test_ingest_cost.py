"""Issue 12: a node report costs few round trips and no ORM work on PostgreSQL, and the
fast path stores exactly what the portable ORM path stores (latest rows, history, health).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from portal.fleet.models import (
    AgentCredential,
    GpuTelemetry,
    NodeHealth,
    NodeObservedState,
    PortTelemetry,
    TelemetrySample,
)
from portal.fleet.services import ingest
from portal.fleet.services.credentials import credential_with_node
from portal.fleet.services.enrolment import credential_authenticate, digest
from portal.inventory.models import Gpu, Node
from tests.portal.fleet.conftest import AgentClient
from tests.portal.fleet.helpers import gpu, port, report, sample

pytestmark = pytest.mark.services("postgres")


def _eight(ts: float, host: str = "h", **extra: Any) -> dict[str, Any]:
    return sample(ts, gpus=[gpu(i, uuid=f"GPU-{host}-{i}") for i in range(8)], **extra)


def _inventory(host: str) -> dict[str, Any]:
    return {"host": {"hostname": host}, "gpus": [
        {"index": i, "uuid": f"GPU-{host}-{i}", "name": "NVIDIA H100 80GB HBM3",
         "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0", "memory_total_bytes": 85520809984}
        for i in range(8)]}


def _script(start: float, host: str) -> list[list[dict[str, Any]]]:
    """Reports exercising every branch: first rows, minute history, a spool resend with
    older samples, an XID, a lost GPU, a link going down and error counters growing."""
    counters = {"link_downed": 0, "symbol_error": 0, "port_rcv_errors": 0}
    g0, g1 = f"GPU-{host}-0", f"GPU-{host}-1"
    return [
        [_eight(start, host)],
        [_eight(start + 10, host)],
        [_eight(start + 65, host), _eight(start + 70, host)],
        [_eight(start + 30, host)],  # older than the latest rows: history only where new
        [sample(start + 130, gpus=[gpu(0, uuid=g0), gpu(1, uuid=g1, healthy=False,
                                                        last_xid=79)],
                ports=[port(counters={**counters, "symbol_error": 3})],
                xids=[{"gpu_uuid": g1, "xid": 79, "ts": start + 129}])],
        [sample(start + 200, gpus=[gpu(0, uuid=g0, lost=True, healthy=False),
                                   gpu(1, uuid=g1)],
                ports=[port(state="DOWN", state_id=1, phys_state_id=3, saturated=["link_downed"],
                            counters={**counters, "symbol_error": 3})])],
        [sample(start + 260, gpus=[gpu(0, uuid=g0), gpu(1, uuid=g1)], ports=[port()])],
    ]


def _stored(node: Node) -> dict[str, Any]:
    def rows(model: Any, *order: str) -> list[dict[str, Any]]:
        return list(model.objects.filter(node=node).order_by(*order).values(
            *[f.attname for f in model._meta.concrete_fields if f.attname not in ("id",
                                                                                    "node_id")]))

    health = NodeHealth.objects.get(node=node)
    return {"gpus": rows(GpuTelemetry, "index"), "ports": rows(PortTelemetry, "device"),
            "history": rows(TelemetrySample, "kind", "key", "minute"),
            "alerts": [{k: v for k, v in a.items() if k != "since"} for a in health.alerts],
            "gpu_health": list(Gpu.objects.filter(node=node).order_by("index")
                               .values_list("index", "health"))}


def _run(client: AgentClient, hostname: str, start: float) -> str:
    """The rows the script leaves, as JSON with the host name taken out."""
    assert client.enrol(hostname, inventory=_inventory(hostname)).status_code == 201
    for seq, telemetry in enumerate(_script(start, hostname), start=1):
        resp = client.report(report(client.node_id, seq, telemetry))
        assert resp.status_code == 200 and resp.json()["status"] == "accepted", resp.content
    stored = _stored(Node.objects.get(hostname=hostname))
    assert len(stored["history"]) > 16 and len(stored["alerts"]) >= 3, stored["alerts"]
    assert dict(stored["gpu_health"])[0] == Gpu.Health.LOST
    return json.dumps(stored, default=str, sort_keys=True).replace(hostname, "HOST")


@pytest.mark.django_db
def test_fast_path_stores_what_the_orm_path_stores(agent_client: AgentClient,
                                                   other_agent: AgentClient,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    start = (time.time() // 60 - 30) * 60 + 5
    fast = _run(agent_client, "gpu-node-51", start)
    monkeypatch.setattr(ingest, "_fast", lambda: False)
    portable = _run(other_agent, "gpu-node-52", start)
    assert fast == portable


@pytest.mark.django_db
def test_steady_state_report_is_two_statements_and_no_transaction_block(
        agent_client: AgentClient) -> None:
    assert agent_client.enrol("gpu-node-53").status_code == 201
    start = time.time() - 100
    for seq in (1, 2):  # rows exist, observed state stored
        agent_client.report(report(agent_client.node_id, seq, [_eight(start + 10 * seq)]))
    with CaptureQueriesContext(connection) as queries:
        resp = agent_client.report(report(agent_client.node_id, 3, [_eight(start + 60)]))
    assert resp.status_code == 200 and resp.json()["status"] == "accepted"
    # the credential (+ agent, node, health, observed, latest telemetry rows), then one
    # statement for the heartbeat and every write; was 4 statements in a transaction
    # block (BEGIN, COMMIT: 6 round trips), 8-10 with the ORM before that
    sql = [q["sql"] for q in queries]
    assert len(sql) == 2, sql
    assert "fleet_gputelemetry" in sql[0] and "INSERT INTO fleet_agentreport" in sql[1]
    assert GpuTelemetry.objects.filter(node__hostname="gpu-node-53",
                                       ts__gte=_aware(start + 60)).count() == 8


def _aware(ts: float) -> Any:
    from datetime import UTC, datetime
    return datetime.fromtimestamp(ts, UTC)


@pytest.mark.django_db
def test_quiet_duplicate_report_writes_no_telemetry(agent_client: AgentClient) -> None:
    """The quiet statement writes telemetry only when it claimed the seq: a resend of an
    already stored seq with other samples changes nothing but the heartbeat."""
    assert agent_client.enrol("gpu-node-55").status_code == 201
    start = time.time() - 300
    agent_client.report(report(agent_client.node_id, 1, [_eight(start)]))
    agent_client.report(report(agent_client.node_id, 2, [_eight(start + 10)]))
    node = Node.objects.get(hostname="gpu-node-55")
    before = (
        list(GpuTelemetry.objects.filter(node=node).order_by("index").values_list("ts")),
        TelemetrySample.objects.filter(node=node).count())
    with CaptureQueriesContext(connection) as queries:
        resp = agent_client.report(report(agent_client.node_id, 2, [_eight(start + 200)]))
    assert resp.json()["status"] == "duplicate"
    assert len(queries) == 2  # the quiet path took it
    after = (list(GpuTelemetry.objects.filter(node=node).order_by("index").values_list("ts")),
             TelemetrySample.objects.filter(node=node).count())
    assert after == before


@pytest.mark.django_db
def test_credential_lookup_reads_the_same_previous_rows(agent_client: AgentClient) -> None:
    """The previous rows read with the credential are those ``telemetry_pg.previous``
    reads (types included: aware datetimes, decoded port data)."""
    from portal.fleet.services import telemetry_pg
    from portal.fleet.services.credentials import credential_with_telemetry

    assert agent_client.enrol("gpu-node-56").status_code == 201
    cred = AgentCredential.objects.get(agent__agent_id=agent_client.node_id)
    found = credential_with_telemetry(cred.credential_hash)
    assert found is not None and found[1] == ({}, {})  # no rows yet
    for seq, samples in enumerate(_script(time.time() - 400, "gpu-node-56")[:5], start=1):
        agent_client.report(report(agent_client.node_id, seq, samples))
    found = credential_with_telemetry(cred.credential_hash)
    assert found is not None and found[0].pk == cred.pk
    node_id = found[0].agent.node_id
    assert found[1] == telemetry_pg.previous(node_id)
    gpus, ports = found[1]
    assert len(gpus) == 8 and len(ports) == 1
    assert all(g["ts"].tzinfo is not None for g in gpus.values())
    assert next(iter(ports.values()))["data"]["counters"]["symbol_error"] == 3


@pytest.mark.django_db
def test_credential_loader_matches_select_related(agent_client: AgentClient) -> None:
    assert agent_client.enrol("gpu-node-54").status_code == 201
    cred = AgentCredential.objects.select_related(
        "agent__node__health").get(agent__agent_id=agent_client.node_id)
    with CaptureQueriesContext(connection) as queries:
        fast = credential_with_node(cred.credential_hash)
        assert fast is not None
        assert (fast.pk, fast.agent.pk, fast.agent.node.pk, fast.agent.node.health.pk) == (
            cred.pk, cred.agent.pk, cred.agent.node.pk, cred.agent.node.health.pk)
        assert fast.agent.node.hostname == "gpu-node-54"
        assert fast.agent.node.health.alerts == [] and fast.agent.last_seq == 0
        with pytest.raises(NodeObservedState.DoesNotExist):
            fast.agent.node.observed  # noqa: B018 - no row yet, as select_related says
    assert len(queries) == 1
    agent_client.report(report(agent_client.node_id, 1, generation_applied=0))
    loaded = credential_with_node(cred.credential_hash)
    assert loaded is not None
    assert loaded.agent.node.observed.document["generation_applied"] == 0
    assert loaded.agent.last_seq == 1
    AgentCredential.objects.filter(pk=cred.pk).update(revoked_at=cred.created)
    assert credential_with_node(cred.credential_hash) is None
    assert credential_authenticate(agent_client.credential) is None
    assert digest(agent_client.credential) == cred.credential_hash

