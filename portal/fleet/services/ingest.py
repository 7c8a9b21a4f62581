"""Report ingestion (§5): idempotent by ``(agent, seq)``, lean on the hot path.

Per accepted node report on PostgreSQL, a quiet one (no health change, no unclean GPU, the
observed state unchanged, the node reachable: nearly every report) costs two statements and
no transaction block: the credential lookup reads the node's latest GPU and port rows with
it (``credentials.credential_with_telemetry``), and ONE statement claims the seq, records
the heartbeat, writes the new latest rows and the per-minute history only if the seq was
claimed, and reads the desired generation (``QUIET_SQL``: one statement is one
transaction). Everything a report would write is worked out before anything is written
(``_plan``); a report that changes more than that runs in a transaction: heartbeat,
telemetry, health, cleaning, the observed state, then the convergence hook
(``fleet.hooks``) moves the node's leases. Other databases take the portable ORM path.
"""

from __future__ import annotations

from dataclasses import dataclass
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
from portal.fleet.services import cleaning, health, restore, telemetry_pg, validation
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


HEARTBEAT_CTES = """
claim AS (
  INSERT INTO fleet_agentreport (agent_id, seq, received, samples)
  VALUES (%(agent)s, %(seq)s, %(now)s, %(sample_count)s)
  ON CONFLICT (agent_id, seq) DO NOTHING RETURNING id),
a AS (
  UPDATE fleet_agent SET last_seen = %(now)s, last_seq = GREATEST(last_seq, %(seq)s),
    agent_version = CASE WHEN %(newest)s THEN %(version)s ELSE agent_version END,
    dropped_reports = CASE WHEN %(newest)s THEN %(dropped)s ELSE dropped_reports END
  WHERE id = %(agent)s RETURNING id),
n AS (
  UPDATE inventory_node SET last_heartbeat = %(now)s,
    agent_version = CASE WHEN %(newest)s THEN %(version)s ELSE agent_version END
  WHERE id = %(node)s RETURNING id)"""
HEARTBEAT_RESULT = """
SELECT (SELECT count(*) FROM claim),
       (SELECT generation FROM fleet_nodedesiredstate WHERE node_id = %(node)s)
"""
HEARTBEAT_SQL = f"WITH {HEARTBEAT_CTES}{HEARTBEAT_RESULT}"
# The heartbeat and the telemetry, the latter written only when the seq was claimed.
QUIET_SQL = (f"WITH {HEARTBEAT_CTES},"  # noqa: S608 - constant SQL fragments only
             f"{telemetry_pg.store_ctes('WHERE EXISTS (SELECT 1 FROM claim)')}"
             f"{HEARTBEAT_RESULT}")
assert AgentReport._meta.db_table == "fleet_agentreport"
assert (Agent._meta.db_table, Node._meta.db_table) == ("fleet_agent", "inventory_node")
assert NodeDesiredState._meta.db_table == "fleet_nodedesiredstate"


def _claim(agent: Agent, seq: int, now: datetime, samples: int) -> bool:
    """Insert the idempotency key; False when ``(agent, seq)`` is already stored."""
    with connection.cursor() as cur:
        cur.execute(CLAIM_SQL, [agent.pk, seq, now, samples])
        return cur.fetchone() is not None


def report_ingest(*, agent: Agent, body: dict[str, Any],
                  previous: telemetry_pg.Previous | None = None) -> dict[str, Any]:
    """Store a validated report of ``agent`` (its ``node_id`` already checked).
    ``previous``: the node's latest telemetry rows, when the caller read them already."""
    now, seq = clock.now(), body["seq"]
    newest = seq >= agent.last_seq
    plan = None
    if agent.role == Role.NODE and _fast():
        assert agent.node is not None
        plan = _plan(agent.node, body, newest, previous)
        if plan.quiet:
            accepted, generation = _quiet_pg(agent, body, now, newest, plan)
            return _answer(seq, accepted, generation)
    with transaction.atomic():
        accepted, generation = _ingest(agent, body, now, newest, plan)
    return _answer(seq, accepted, generation)


def _answer(seq: int, accepted: bool, generation: int | None) -> dict[str, Any]:
    return {"protocol": protocol.PROTOCOL_VERSION, "seq": seq,
            "status": "accepted" if accepted else "duplicate",
            "desired_generation": generation or 0, "rotate_credential": False}


def _ingest(agent: Agent, body: dict[str, Any], now: datetime, newest: bool,
            plan: _Plan | None) -> tuple[bool, int | None]:
    """Every write of a report, in the caller's transaction."""
    if agent.role == Role.NODE and connection.vendor == "postgresql":
        accepted, generation = _heartbeat_pg(agent, body, now, newest)
    else:
        accepted, generation = _heartbeat_orm(agent, body, now, newest)
    if agent.role == Role.FABRIC:
        if accepted and newest:
            _fabric_observed(body["observed"])
            restore.fabric_resync(observed=body["observed"])
    else:
        assert agent.node is not None
        if accepted and _node_report(agent.node, body, newest, plan):
            hooks.node_converged(agent.node.pk)  # what waits for this node moves now
        health.heartbeat(node=agent.node, now=now)
    return accepted, generation


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
    with connection.cursor() as cur:
        cur.execute(HEARTBEAT_SQL, _heartbeat_params(agent, body, now, newest))
        claimed, generation = cur.fetchone()
    return bool(claimed), generation


def _heartbeat_params(agent: Agent, body: dict[str, Any], now: datetime,
                      newest: bool) -> dict[str, Any]:
    return {"agent": agent.pk, "node": agent.node_id, "seq": body["seq"], "now": now,
            "sample_count": len(body["telemetry"]), "newest": newest,
            "version": body["agent_version"][:32], "dropped": body["dropped_reports"]}


def _quiet_pg(agent: Agent, body: dict[str, Any], now: datetime, newest: bool,
              plan: _Plan) -> tuple[bool, int | None]:
    """A quiet report's every write in one statement (``QUIET_SQL``), autocommitted."""
    assert agent.node_id is not None
    params = {**_heartbeat_params(agent, body, now, newest),
              **telemetry_pg.store_params(agent.node_id, *_store_rows(plan))}
    with connection.cursor() as cur:
        cur.execute(QUIET_SQL, params)
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


Fresh = dict[Any, tuple[datetime, dict[str, Any]]]


@dataclass(frozen=True)
class _Plan:
    """What a node's report writes, worked out before anything is written."""

    prev_gpus: dict[int, dict[str, Any]]
    prev_ports: dict[tuple[str, int], dict[str, Any]]
    history: list[SampleRow]
    gpus: Fresh  # the latest rows that are newer than the stored ones
    ports: Fresh
    xids: list[dict[str, Any]]
    observed: dict[str, Any] | None  # the observed state to write (None: unchanged)
    quiet: bool  # nothing to write but the heartbeat and the telemetry


def _plan(node: Node, body: dict[str, Any], newest: bool,
          previous: telemetry_pg.Previous | None) -> _Plan:
    telemetry = body["telemetry"]
    prev_gpus, prev_ports = previous if previous is not None else _previous(node)
    history = gpu_sample_rows(telemetry, prev_gpus) + port_sample_rows(telemetry, prev_ports)
    gpus = _latest(telemetry, "gpus", lambda g: g["index"])
    ports = _latest(telemetry, "ib_ports", lambda p: (p["device"], p["port"]))
    fresh_gpus = {k: v for k, v in gpus.items()
                  if k not in prev_gpus or v[0] > prev_gpus[k]["ts"]}
    fresh_ports = {k: v for k, v in ports.items()
                   if k not in prev_ports or v[0] > prev_ports[k]["ts"]}
    xids = [e for t in telemetry for e in t.get("xid_events") or []]
    observed = _observed_values(node, body["observed"]) if newest else None
    quiet = (observed is None and health.is_reachable(node)
             and not health.would_change(
                 gpus=_stamped(fresh_gpus), prev_gpus=prev_gpus,
                 ports=_stamped(fresh_ports), prev_ports=prev_ports,
                 xid_events=xids)
             and not (newest and cleaning.new_unclean(body["observed"],
                                                      cleaning.previous_observed(node))))
    return _Plan(prev_gpus, prev_ports, history, fresh_gpus, fresh_ports, xids, observed,
                 quiet)


def _stamped(latest: Fresh) -> dict[Any, dict[str, Any]]:
    """Each latest entry with its sample time (``ts``): the health policy's rates and
    billing's fault time come from when it was measured, not when it arrived."""
    return {k: {**entry, "ts": ts} for k, (ts, entry) in latest.items()}


def _node_report(node: Node, body: dict[str, Any], newest: bool,
                 plan: _Plan | None) -> bool:
    """Store the report; True when the node's observed state changed."""
    plan = plan or _plan(node, body, newest, None)
    _store(node, plan)
    health.evaluate(node=node, gpus=_stamped(plan.gpus),
                    prev_gpus=plan.prev_gpus, ports=_stamped(plan.ports),
                    prev_ports=plan.prev_ports, xid_events=plan.xids)
    if newest:  # before the convergence hook: nothing waiting on an unclean GPU activates
        cleaning.unclean_reported(node=node, observed=body["observed"],
                                  previous=cleaning.previous_observed(node))
    if plan.observed is None:
        return False
    _node_observed(node, plan.observed)
    restore.node_resync(node=node, observed=plan.observed["document"])  # after a restore
    result = plan.observed["document"].get("validation")
    if isinstance(result, dict):  # a repaired node proving itself (services.validation)
        validation.observed(node=node, result=result)
    return True


def _store_rows(plan: _Plan) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                      list[SampleRow]]:
    """The latest GPU and port rows and the history rows, as ``telemetry_pg`` takes them."""
    return ([_gpu_row(i, ts, g) for i, (ts, g) in plan.gpus.items()],
            [_port_row(k, ts, p) for k, (ts, p) in plan.ports.items()], plan.history)


def _store(node: Node, plan: _Plan) -> None:
    if _fast():
        telemetry_pg.store(node.pk, *_store_rows(plan))
        return
    samples_store(node, plan.history)
    _upsert_gpus(node, plan.gpus)
    _upsert_ports(node, plan.ports)


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


def _observed_values(node: Node, observed: dict[str, Any]) -> dict[str, Any] | None:
    """The node's observed state row as this report has it; None when it is unchanged."""
    parts = [p for p in observed.get("partitions") or [] if isinstance(p, dict)]
    values = {"generation_applied": observed["generation_applied"],
              "partitions_in_sync": all(p.get("in_sync") is True for p in parts),
              "document": observed}
    try:
        old = node.observed  # loaded with the credential (select_related)
        if (old.generation_applied, old.partitions_in_sync, old.document) == (
                values["generation_applied"], values["partitions_in_sync"], observed):
            return None  # unchanged: no write on the hot path
    except NodeObservedState.DoesNotExist:
        pass
    return values


def _node_observed(node: Node, values: dict[str, Any]) -> None:
    values = {**values, "updated": clock.now()}
    if not NodeObservedState.objects.filter(node=node).update(**values):
        NodeObservedState.objects.update_or_create(node=node, defaults=values)


def _fabric_observed(observed: dict[str, Any]) -> None:
    drift = [d for d in observed.get("drift") or [] if isinstance(d, dict)]
    FabricObservedState.objects.update_or_create(name="default", defaults={
        "generation_applied": observed["generation_applied"],
        "manager": str(observed.get("manager") or "")[:32], "drift": drift,
        "document": observed})
