"""The agent API's credential lookup in one prepared statement (the report hot path).

What ``AgentCredential.objects.select_related("agent__node__health",
"agent__node__observed")`` loads, without compiling a query per request: the SQL is built
once from the models' own columns, each row is split into the five models
(``Model.from_db``, JSON columns decoded by their fields) and linked through the same
caches ``select_related`` fills, so ``cred.agent.node.health`` costs no further query and
a missing health or observed row raises ``DoesNotExist`` as usual.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.db import connection, models

from portal.fleet.models import Agent, AgentCredential, NodeHealth, NodeObservedState
from portal.fleet.services import telemetry_pg
from portal.inventory.models import Node

# (model, alias, joined on) in select order; the first two are inner joins
_CHAIN: tuple[tuple[type[models.Model], str, str], ...] = (
    (AgentCredential, "c", ""),
    (Agent, "a", "a.id = c.agent_id"),
    (Node, "n", "n.id = a.node_id"),
    (NodeHealth, "h", "h.node_id = n.id"),
    (NodeObservedState, "o", "o.node_id = n.id"),
)


def _columns(model: type[models.Model], alias: str) -> list[str]:
    return [f'{alias}."{f.column}"' for f in model._meta.concrete_fields]


@cache
def _sql(telemetry: bool = False) -> str:
    """The lookup; with ``telemetry`` (PostgreSQL), the node's latest telemetry rows too
    (``telemetry_pg.PREVIOUS_COLUMNS``, after the models' columns)."""
    cols = ", ".join(c for model, alias, _ in _CHAIN for c in _columns(model, alias))
    if telemetry:
        cols += ", " + telemetry_pg.PREVIOUS_COLUMNS
    joins = [f'{"JOIN" if i < 2 else "LEFT JOIN"} "{m._meta.db_table}" {alias} ON {on}'
             for i, (m, alias, on) in enumerate(_CHAIN) if on]
    first = _CHAIN[0]
    source = f'"{first[0]._meta.db_table}" {first[1]} {" ".join(joins)}'
    where = 'c."credential_hash" = %s AND c."revoked_at" IS NULL'
    return f"SELECT {cols} FROM {source} WHERE {where}"  # noqa: S608 - model names only


Layout = tuple[type[models.Model], int, int, list[str], tuple[tuple[int, Any, list[Any]], ...]]
_LAYOUTS: dict[str, tuple[Layout, ...]] = {}


def _layout() -> tuple[Layout, ...]:
    """Per model of ``_CHAIN``: its slice of the row, its attnames and, per column that
    needs one, what Django's compiler would apply to a raw value — the backend's
    converters (SQLite: text → aware datetime) and the field's (JSON decoding). Built
    once per database vendor."""
    if (found := _LAYOUTS.get(connection.vendor)) is not None:
        return found
    out, at = [], 0
    for model, _, _ in _CHAIN:
        fields = model._meta.concrete_fields
        converting = []
        for i, field in enumerate(fields):
            col = field.get_col(model._meta.db_table)
            funcs = connection.ops.get_db_converters(col) + col.get_db_converters(connection)
            if funcs:
                converting.append((i, col, funcs))
        out.append((model, at, at + len(fields), [f.attname for f in fields],
                    tuple(converting)))
        at += len(fields)
    _LAYOUTS[connection.vendor] = tuple(out)
    return _LAYOUTS[connection.vendor]


def _split(row: tuple[Any, ...]) -> list[Any]:
    out = []
    for model, start, end, attnames, converting in _layout():
        values = list(row[start:end])
        if values[0] is None:  # LEFT JOIN found nothing
            out.append(None)
            continue
        for i, col, funcs in converting:
            for convert in funcs:
                values[i] = convert(values[i], col, connection)
        out.append(model.from_db(connection.alias, attnames, values))
    return out


def credential_with_node(credential_hash: str) -> AgentCredential | None:
    """The unrevoked credential with that hash, its agent, node, health and observed state
    loaded (expiry is the caller's check); ``None`` if there is none."""
    with connection.cursor() as cur:
        cur.execute(_sql(), [credential_hash])
        row = cur.fetchone()
    return None if row is None else _linked(row)


def credential_with_telemetry(
        credential_hash: str) -> tuple[AgentCredential, telemetry_pg.Previous | None] | None:
    """``credential_with_node`` and, on PostgreSQL for a node's credential, that node's
    latest telemetry rows (``telemetry_pg.previous``) read in the same statement: a report
    needs both (``None`` in second place: read them yourself)."""
    if connection.vendor != "postgresql":
        cred = credential_with_node(credential_hash)
        return None if cred is None else (cred, None)
    with connection.cursor() as cur:
        cur.execute(_sql(telemetry=True), [credential_hash])
        row = cur.fetchone()
    if row is None:
        return None
    cred = _linked(row)
    if cred.agent.node_id is None:
        return cred, None
    return cred, telemetry_pg.previous_from(row[-2], row[-1])


def _linked(row: tuple[Any, ...]) -> AgentCredential:
    """The row's five models, linked as ``select_related`` links them."""
    cred, agent, node, health, observed = _split(row)
    AgentCredential._meta.get_field("agent").set_cached_value(cred, agent)
    Agent._meta.get_field("node").set_cached_value(agent, node)
    if node is not None:
        Node._meta.get_field("health").set_cached_value(node, health)  # type: ignore[union-attr]
        Node._meta.get_field("observed").set_cached_value(node, observed)  # type: ignore[union-attr]
    return cred  # type: ignore[no-any-return]
