"""Report ingestion (§5): idempotent by ``(agent, seq)``, lean on the hot path.

Per accepted node report on PostgreSQL: one statement claims the seq, records the
heartbeat and reads the desired generation; one reads the previous latest GPU and port
rows; one writes the new latest rows and the per-minute history (``telemetry_pg``); the
observed state is written only when it changed, and only then does the convergence hook
(``fleet.hooks``) move the node's leases. Other databases take the portable ORM path.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db import connection, transaction
from django.db.models.functions import Greatest

from portal.core import clock
from portal.fleet import hooks, protocol
from portal.fleet.models import (
    Agent,
    AgentReport,
    FabricDesiredState,
    FabricObservedState,
    GpuTelemetry,
    NodeDesiredState,
    NodeObservedState,
    PortTelemetry,
)
from portal.fleet.models.agents import Role
from portal.fleet.services import cleaning, health, telemetry_pg
from portal.fleet.services.samples import (
    SampleRow,
    gpu_sample_rows,
    port_sample_rows,
    samples_store,
)
from portal.inventory.models import Node

GPU_FIELDS = ["uuid", "ts", "healthy", "lost", "last_xid", "data"]
PORT_FIELDS = ["port_guid", "ts", "state_id", "phys_state_id", "data"]
CLAIM_SQL = ("INSERT INTO fleet_agentreport (agent_id, seq, received, samples) "
             "VALUES (%s, %s, %s, %s) ON CONFLICT (agent_id, seq) DO NOTHING RETURNING id")


def _ts(value: float) -> datetime:
    return datetime.fromtimestamp(value, UTC)


HEARTBEAT_SQL = """
WITH claim AS (
  INSERT INTO fleet_agentreport (agent_id, seq, received, samples)
  VALUES (%(agent)s, %(seq)s, %(now)s, %(samples)s)
  ON CONFLICT (agent_id, seq) DO NOTHING RETURNING id),
a AS (
  UPDATE fleet_agent SET last_seen = %(now)s, last_seq = GREATEST(last_seq, %(seq)s),
    agent_version = CASE WHEN %(newest)s THEN %(version)s ELSE agent_version END,
    dropped_reports = CASE WHEN %(newest)s THEN %(dropped)s ELSE dropped_reports END
  WHERE id = %(agent)s RETURNING id),
n AS (
  UPDATE inventory_node SET last_heartbeat = %(now)s,
    agent_version = CASE WHEN %(newest)s THEN %(version)s ELSE agent_version END
  WHERE id = %(node)s RETURNING id)
SELECT (SELECT count(*) FROM claim),
       (SELECT generation FROM fleet_nodedesiredstate WHERE node_id = %(node)s)
"""
assert AgentReport._meta.db_table == "fleet_agentreport"
assert (Agent._meta.db_table, Node._meta.db_table) == ("fleet_agent", "inventory_node")
assert NodeDesiredState._meta.db_table == "fleet_nodedesiredstate"


def _claim(agent: Agent, seq: int, now: datetime, samples: int) -> bool:
    """Insert the idempotency key; False when ``(agent, seq)`` is already stored."""
    with connection.cursor() as cur:
        cur.execute(CLAIM_SQL, [agent.pk, seq, now, samples])
        return cur.fetchone() is not None


@transaction.atomic
def report_ingest(*, agent: Agent, body: dict[str, Any]) -> dict[str, Any]:
    """Store a validated report of ``agent`` (its ``node_id`` already checked)."""
    now, seq = clock.now(), body["seq"]
    newest = seq >= agent.last_seq
    if agent.role == Role.NODE and connection.vendor == "postgresql":
        accepted, generation = _heartbeat_pg(agent, body, now, newest)
    else:
        accepted, generation = _heartbeat_orm(agent, body, now, newest)
    if agent.role == Role.FABRIC:
        if accepted and newest:
            _fabric_observed(body["observed"])
    else:
        assert agent.node is not None
        if accepted and _node_report(agent.node, body, newest):
            hooks.node_converged(agent.node.pk)  # what waits for this node moves now
        health.heartbeat(node=agent.node, now=now)
    return {"protocol": protocol.PROTOCOL_VERSION, "seq": seq,
            "status": "accepted" if accepted else "duplicate",
            "desired_generation": generation or 0, "rotate_credential": False}


def _heartbeat_orm(agent: Agent, body: dict[str, Any], now: datetime,
                   newest: bool) -> tuple[bool, int | None]:
    """Claim the seq, record the heartbeat, read the desired generation (portable)."""
    accepted = _claim(agent, body["seq"], now, len(body["telemetry"]))
    version = {"agent_version": body["agent_version"][:32]} if newest else {}
    Agent.objects.filter(pk=agent.pk).update(
        last_seen=now, last_seq=Greatest("last_seq", body["seq"]),
        **({**version, "dropped_reports": body["dropped_reports"]} if newest else {}))
    if agent.role == Role.FABRIC:
        return accepted, FabricDesiredState.objects.filter(name="default").values_list(
            "generation", flat=True).first()
    Node.objects.filter(pk=agent.node_id).update(last_heartbeat=now, **version)
    return accepted, NodeDesiredState.objects.filter(node_id=agent.node_id).values_list(
        "generation", flat=True).first()


def _heartbeat_pg(agent: Agent, body: dict[str, Any], now: datetime,
                  newest: bool) -> tuple[bool, int | None]:
    """The same as ``_heartbeat_orm`` in one round trip (data-modifying CTEs)."""
    params = {"agent": agent.pk, "node": agent.node_id, "seq": body["seq"], "now": now,
              "samples": len(body["telemetry"]), "newest": newest,
              "version": body["agent_version"][:32], "dropped": body["dropped_reports"]}
    with connection.cursor() as cur:
        cur.execute(HEARTBEAT_SQL, params)
        claimed, generation = cur.fetchone()
    return bool(claimed), generation


def _fast() -> bool:
    """PostgreSQL: telemetry in two statements (``telemetry_pg``); else the ORM path."""
    return connection.vendor == "postgresql"


def _previous(node: Node) -> telemetry_pg.Previous:
    """The node's latest GPU and port rows before this report."""
    if _fast():
        return telemetry_pg.previous(node.pk)
    return ({r["index"]: r for r in GpuTelemetry.objects.filter(node=node).values(
                "index", "ts", "healthy", "lost", "last_xid")},
            {(r["device"], r["port"]): r for r in PortTelemetry.objects.filter(
                node=node).values("device", "port", "ts", "state_id", "phys_state_id", "data")})


def _node_report(node: Node, body: dict[str, Any], newest: bool) -> bool:
    """Store the report; True when the node's observed state changed."""
    telemetry = body["telemetry"]
    prev_gpus, prev_ports = _previous(node)
    history = gpu_sample_rows(telemetry, prev_gpus) + port_sample_rows(telemetry, prev_ports)
    gpus = _latest(telemetry, "gpus", lambda g: g["index"])
    ports = _latest(telemetry, "ib_ports", lambda p: (p["device"], p["port"]))
    fresh_gpus = {k: v for k, v in gpus.items()
                  if k not in prev_gpus or v[0] > prev_gpus[k]["ts"]}
    fresh_ports = {k: v for k, v in ports.items()
                   if k not in prev_ports or v[0] > prev_ports[k]["ts"]}
    _store(node, fresh_gpus, fresh_ports, history)
    xids = [e for t in telemetry for e in t.get("xid_events") or []]
    health.evaluate(node=node, gpus={k: v[1] for k, v in fresh_gpus.items()},
                    prev_gpus=prev_gpus, ports={k: v[1] for k, v in fresh_ports.items()},
                    prev_ports=prev_ports, xid_events=xids)
    if newest:  # before the convergence hook: nothing waiting on an unclean GPU activates
        cleaning.unclean_reported(node=node, observed=body["observed"],
                                  previous=cleaning.previous_observed(node))
    return newest and _node_observed(node, body["observed"])


def _store(node: Node, gpus: dict[int, tuple[datetime, dict[str, Any]]],
           ports: dict[Any, tuple[datetime, dict[str, Any]]], history: list[SampleRow]) -> None:
    if _fast():
        telemetry_pg.store(node.pk, [_gpu_row(i, ts, g) for i, (ts, g) in gpus.items()],
                           [_port_row(k, ts, p) for k, (ts, p) in ports.items()], history)
        return
    samples_store(node, history)
    _upsert_gpus(node, gpus)
    _upsert_ports(node, ports)


def _latest(telemetry: list[dict[str, Any]], key: str,
            ident: Any) -> dict[Any, tuple[datetime, dict[str, Any]]]:
    out: dict[Any, tuple[datetime, dict[str, Any]]] = {}
    for item in telemetry:  # oldest first: later samples win
        ts = _ts(item["ts"])
        for entry in item.get(key) or []:
            out[ident(entry)] = (ts, entry)
    return out


def _gpu_row(index: int, ts: datetime, g: dict[str, Any]) -> dict[str, Any]:
    return {"index": index, "uuid": str(g.get("uuid") or "")[:64], "ts": ts,
            "healthy": bool(g["healthy"]), "lost": bool(g.get("lost", False)),
            "last_xid": g.get("last_xid"), "data": g}


def _port_row(key: tuple[str, int], ts: datetime, p: dict[str, Any]) -> dict[str, Any]:
    return {"device": key[0][:32], "port": key[1], "port_guid": str(p.get("port_guid") or ""),
            "ts": ts, "state_id": _small(p.get("state_id")),
            "phys_state_id": _small(p.get("phys_state_id")), "data": p}


def _upsert_gpus(node: Node, gpus: dict[int, tuple[datetime, dict[str, Any]]]) -> None:
    if not gpus:
        return
    rows = [GpuTelemetry(node=node, **_gpu_row(index, ts, g))
            for index, (ts, g) in gpus.items()]
    GpuTelemetry.objects.bulk_create(rows, update_conflicts=True, update_fields=GPU_FIELDS,
                                     unique_fields=["node", "index"])


def _upsert_ports(node: Node, ports: dict[Any, tuple[datetime, dict[str, Any]]]) -> None:
    if not ports:
        return
    rows = [PortTelemetry(node=node, **_port_row(key, ts, p)) for key, (ts, p) in ports.items()]
    PortTelemetry.objects.bulk_create(rows, update_conflicts=True, update_fields=PORT_FIELDS,
                                      unique_fields=["node", "device", "port"])


def _small(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) \
        and 0 <= value < 32768 else None


def _node_observed(node: Node, observed: dict[str, Any]) -> bool:
    parts = [p for p in observed.get("partitions") or [] if isinstance(p, dict)]
    values = {"generation_applied": observed["generation_applied"],
              "partitions_in_sync": all(p.get("in_sync") is True for p in parts),
              "document": observed, "updated": clock.now()}
    try:
        old = node.observed  # loaded with the credential (select_related)
        if (old.generation_applied, old.partitions_in_sync, old.document) == (
                values["generation_applied"], values["partitions_in_sync"], observed):
            return False  # unchanged: no write on the hot path
    except NodeObservedState.DoesNotExist:
        pass
    if not NodeObservedState.objects.filter(node=node).update(**values):
        NodeObservedState.objects.update_or_create(node=node, defaults=values)
    return True


def _fabric_observed(observed: dict[str, Any]) -> None:
    drift = [d for d in observed.get("drift") or [] if isinstance(d, dict)]
    FabricObservedState.objects.update_or_create(name="default", defaults={
        "generation_applied": observed["generation_applied"],
        "manager": str(observed.get("manager") or "")[:32], "drift": drift,
        "document": observed})
