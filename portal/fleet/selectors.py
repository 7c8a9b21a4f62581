"""Reads of the fleet app: convergence, desired documents, health and drift for pages."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from django.db import connection, models
from django.db.models import Q

from portal.fleet.models import (
    Agent,
    AgentCredential,
    FabricDesiredState,
    FabricObservedState,
    GpuTelemetry,
    NodeDesiredState,
    NodeHealth,
    NodeObservedState,
    PortTelemetry,
)
from portal.fleet.models.agents import Role
from portal.inventory.models import Gpu, Node


def node_converged(*, node: Node, generation: int) -> bool:
    """The node applied ``generation`` (or later) without errors and its ports are in sync."""
    return NodeObservedState.objects.filter(
        node=node, generation_applied__gte=generation, partitions_in_sync=True).exists()


@dataclass(frozen=True)
class DesiredRead:
    """One read of the long-poll: whose credential it is, and the desired-state document
    if its generation is above the ``after_generation`` asked for (else ``None``)."""

    agent_id: str
    role: str
    node_pk: int | None
    valid_until: datetime | None
    document: dict[str, Any] | None


def _quoted(model: type[models.Model], field: str = "") -> str:
    """A model's quoted table name, or (``field``) the quoted column of one of its fields."""
    name = model._meta.get_field(field).column if field else model._meta.db_table  # type: ignore[union-attr]
    return connection.ops.quote_name(name)


@cache
def _desired_sql() -> str:
    """The long-poll's statement, built once from the models' own names (no query
    compiled per request: at 10,000 agents that compiling took a fifth of the web tier's
    CPU). Parameters: the fabric role, the fabric document's name, ``after`` twice, the
    credential hash."""
    q, ac, ag = _quoted, AgentCredential, Agent
    nd, fd = NodeDesiredState, FabricDesiredState
    fabric_doc = (f"SELECT f.{q(fd, 'document')} FROM {q(fd)} f "  # noqa: S608
                  f"WHERE f.{q(fd, 'name')} = %s AND f.{q(fd, 'generation')} > %s")
    node_doc = (f"SELECT d.{q(nd, 'document')} FROM {q(nd)} d "  # noqa: S608
                f"WHERE d.{q(nd, 'node')} = a.{q(ag, 'node')} AND d.{q(nd, 'generation')} > %s")
    return (f"SELECT a.{q(ag, 'agent_id')}, a.{q(ag, 'role')}, a.{q(ag, 'node')}, "  # noqa: S608
            f"c.{q(ac, 'valid_until')}, CASE WHEN a.{q(ag, 'role')} = %s "
            f"THEN ({fabric_doc}) ELSE ({node_doc}) END "
            f"FROM {q(ac)} c JOIN {q(ag)} a ON a.{q(ag, 'id')} = c.{q(ac, 'agent')} "
            f"WHERE c.{q(ac, 'credential_hash')} = %s AND c.{q(ac, 'revoked_at')} IS NULL")


def _converted(model: type[models.Model], field: str, value: Any) -> Any:
    """``value`` as the ORM would load it: the backend's converters (SQLite: text → aware
    datetime) and the field's (JSON decoding)."""
    if value is None:
        return None
    col = model._meta.get_field(field).get_col(model._meta.db_table)  # type: ignore[union-attr]
    for convert in connection.ops.get_db_converters(col) + col.get_db_converters(connection):
        value = convert(value, col, connection)
    return value


def desired_document(*, credential_hash: str, after_generation: int) -> DesiredRead | None:
    """The long-poll's one round trip: the live (not revoked) credential with that hash,
    its agent, and the agent's desired-state document only if it is newer than
    ``after_generation`` (the body is not read otherwise). ``None``: no such credential.
    One SELECT in autocommit: no transaction, no write (expiry is checked by the caller)."""
    with connection.cursor() as cur:
        cur.execute(_desired_sql(), [Role.FABRIC.value, "default", after_generation,
                                     after_generation, credential_hash])
        row = cur.fetchone()
    if row is None:
        return None
    agent_id, role, node_pk, valid_until, doc = row
    doc = _converted(NodeDesiredState, "document", doc)
    if doc is not None and role == Role.FABRIC:
        doc = {**doc, "node_id": agent_id}
    return DesiredRead(agent_id=agent_id, role=role, node_pk=node_pk,
                       valid_until=_converted(AgentCredential, "valid_until", valid_until),
                       document=doc)


def unreachable_node_ids() -> set[int]:
    """Nodes whose agent stopped reporting: keep their leases, offer their GPUs to nobody."""
    return set(NodeHealth.objects.filter(reachable=False).values_list("node_id", flat=True))


def hardware_problems_for(node_ids: Iterable[int]) -> list[dict[str, Any]]:
    """Problems to show on lease pages and to operators: unreachable nodes, node alerts
    (GPU XIDs, IB link/errors) and GPUs not healthy. Sorted by node and key."""
    ids = list(node_ids)
    out: list[dict[str, Any]] = []
    hostnames = dict(Node.objects.filter(pk__in=ids).values_list("pk", "hostname"))
    for row in NodeHealth.objects.filter(node_id__in=ids).only("node_id", "alerts"):
        for alert in row.alerts:
            out.append({"node_id": row.node_id, "hostname": hostnames.get(row.node_id, ""),
                        **alert})
    keyed = {(p["node_id"], p["key"]) for p in out}
    bad = Gpu.objects.filter(node_id__in=ids).exclude(health=Gpu.Health.HEALTHY)
    for gpu in bad.values("node_id", "index", "uuid", "health"):
        if (gpu["node_id"], f"gpu:{gpu['index']}") not in keyed:
            out.append({"node_id": gpu["node_id"], "hostname": hostnames.get(gpu["node_id"], ""),
                        "key": f"gpu:{gpu['index']}", "kind": "gpu", "severity": "critical",
                        "message": f"GPU {gpu['index']} ({gpu['uuid']}) {gpu['health']}",
                        "since": None})
    return sorted(out, key=lambda p: (p["hostname"], p["key"]))


def partition_drift() -> dict[str, Any]:
    """The fabric manager's last report: generations and P_Key drift (for the console)."""
    desired = FabricDesiredState.objects.filter(name="default").first()
    observed = FabricObservedState.objects.filter(name="default").first()
    return {
        "desired_generation": desired.generation if desired else 0,
        "generation_applied": observed.generation_applied if observed else 0,
        "manager": observed.manager if observed else "",
        "drift": list(observed.drift) if observed else [],
        "reported_at": observed.updated if observed else None,
    }


def node_telemetry(*, node: Node) -> dict[str, list[dict[str, Any]]]:
    """Latest telemetry of one node's GPUs and ports (for node/lease pages)."""
    return {
        "gpus": list(GpuTelemetry.objects.filter(node=node).order_by("index")
                     .values("index", "uuid", "ts", "healthy", "lost", "last_xid", "data")),
        "ports": list(PortTelemetry.objects.filter(node=node).order_by("device", "port")
                      .values("device", "port", "port_guid", "ts", "state_id",
                              "phys_state_id", "data")),
    }


def gpu_utilisation(*, gpus: Iterable[tuple[int, int]], start: Any,
                    end: Any) -> dict[tuple[int, int], float]:
    """Average ``gpu_util_pct`` per ``(node_id, gpu index)`` over the per-minute history in
    ``[start, end)`` (for billing exports); GPUs without samples are absent."""
    from portal.fleet.models import TelemetrySample

    wanted = {(n, str(i)) for n, i in gpus}
    sums: dict[tuple[int, int], list[float]] = {}
    rows = TelemetrySample.objects.filter(
        kind="gpu", node_id__in={n for n, _ in wanted}, minute__gte=start, minute__lt=end,
    ).values_list("node_id", "key", "values__gpu_util_pct")
    for node_id, key, util in rows.iterator(chunk_size=5000):
        if (node_id, key) in wanted and isinstance(util, int | float):
            acc = sums.setdefault((node_id, int(key)), [0.0, 0])
            acc[0] += util
            acc[1] += 1
    return {k: round(total / count, 2) for k, (total, count) in sums.items()}


def telemetry_history(*, gpus: Iterable[tuple[int, int, datetime]],
                      nodes: Iterable[tuple[int, datetime]],
                      until: datetime) -> list[dict[str, Any]]:
    """Per-minute history of some GPUs and of the HCA ports of some nodes, oldest first, in
    one query: ``gpus`` is ``(node_id, gpu index, since)``, ``nodes`` is ``(node_id, since)``
    for their ports. Only rows whose minute is in ``[since, until)`` are returned, so a
    caller passing a lease's start never sees the minutes before it (another lease's).

    Rows: ``{"node_id", "kind", "key", "minute", "values"}``.
    """
    from portal.fleet.models import TelemetrySample

    groups: dict[tuple[int, datetime], list[str]] = {}
    for node_id, index, since in gpus:
        groups.setdefault((node_id, since), []).append(str(index))
    wanted = Q()
    for (node_id, since), keys in groups.items():
        wanted |= Q(kind=TelemetrySample.Kind.GPU, node_id=node_id, key__in=sorted(keys),
                    minute__gte=since)
    for node_id, since in nodes:
        wanted |= Q(kind=TelemetrySample.Kind.PORT, node_id=node_id, minute__gte=since)
    if not wanted:
        return []
    return list(TelemetrySample.objects.filter(wanted, minute__lt=until)
                .order_by("minute", "node_id", "kind", "key")
                .values("node_id", "kind", "key", "minute", "values"))


def enrolment_requests(*, pending_only: bool = True) -> Any:
    """Held enrolments (takeovers awaiting an operator), newest first, for the console."""
    from portal.fleet.models import EnrolmentRequest

    rows = EnrolmentRequest.objects.select_related("agent", "agent__node", "decided_by")
    if pending_only:
        rows = rows.filter(state=EnrolmentRequest.State.PENDING)
    return rows.order_by("-created")


def pending_validation(node: Node) -> Any:
    """The validation run the node's agent is asked for now (the newest unfinished one)."""
    from portal.fleet.models import NodeValidation

    return NodeValidation.objects.filter(node=node, finished_at__isnull=True).first()


def validation_entry(node: Node) -> dict[str, Any] | None:
    """The desired document's ``validation`` value, or None when nothing is asked."""
    run = pending_validation(node)
    return None if run is None else {"id": run.request_id, "level": run.level}
