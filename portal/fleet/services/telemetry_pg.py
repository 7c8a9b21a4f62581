"""A node report's telemetry on PostgreSQL in few round trips, without the ORM.

``PREVIOUS_COLUMNS`` are two scalar subqueries that read the node's latest GPU and port rows
as JSON: the agent API's credential lookup selects them with the credential
(``credentials.credential_with_telemetry``), so a report reads what it needs in one
statement; ``previous`` reads them alone (other callers). ``store_ctes`` are the
data-modifying CTEs that write the new latest rows (upserts) and the new per-minute history
rows (insert, a minute already stored is kept) over ``jsonb_to_recordset`` of one JSON
parameter each, encoded once (``core.jsontext``): ``store`` runs them as one statement, the
ingest's quiet path with the heartbeat in one statement (``ingest.QUIET_SQL``). The rows
and their conflict rules are those of the portable ORM path (``ingest._upsert_*``,
``samples.samples_store``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import connection

from portal.core import jsontext
from portal.fleet.models import GpuTelemetry, PortTelemetry, TelemetrySample
from portal.fleet.services.samples import SampleRow

assert (GpuTelemetry._meta.db_table, PortTelemetry._meta.db_table,
        TelemetrySample._meta.db_table) == (
    "fleet_gputelemetry", "fleet_porttelemetry", "fleet_telemetrysample")

# Evaluated per credential row (alias ``n``: the node) or alone (``previous``); as text,
# decoded by ``jsontext.loads`` (psycopg would decode ``json`` with the standard library).
PREVIOUS_COLUMNS = """
(SELECT json_agg(json_build_array("index", ts, healthy, lost, last_xid))::text
   FROM fleet_gputelemetry WHERE node_id = n.id),
(SELECT json_agg(json_build_array(device, port, ts, state_id, phys_state_id, data))::text
   FROM fleet_porttelemetry WHERE node_id = n.id)
"""
PREVIOUS_SQL = (f"SELECT {PREVIOUS_COLUMNS} "  # noqa: S608 - constant SQL fragments only
                "FROM inventory_node n WHERE n.id = %(node)s")


def store_ctes(guard: str = "") -> str:
    """The three upserts as CTEs ``g``, ``p``, ``s``; ``guard`` (a ``WHERE`` clause) writes
    them only when it holds (the quiet path: only when the report's seq was claimed)."""
    return f"""
g AS (
  INSERT INTO fleet_gputelemetry (node_id, "index", uuid, ts, healthy, lost, last_xid, data)
  SELECT %(node)s, r."index", r.uuid, r.ts, r.healthy, r.lost, r.last_xid, r.data
    FROM jsonb_to_recordset(%(gpus)s::jsonb) AS r("index" int, uuid text, ts timestamptz,
         healthy bool, lost bool, last_xid int, data jsonb) {guard}
  ON CONFLICT (node_id, "index") DO UPDATE SET uuid = EXCLUDED.uuid, ts = EXCLUDED.ts,
    healthy = EXCLUDED.healthy, lost = EXCLUDED.lost, last_xid = EXCLUDED.last_xid,
    data = EXCLUDED.data
  RETURNING 1),
p AS (
  INSERT INTO fleet_porttelemetry (node_id, device, port, port_guid, ts, state_id,
                                   phys_state_id, data)
  SELECT %(node)s, r.device, r.port, r.port_guid, r.ts, r.state_id, r.phys_state_id, r.data
    FROM jsonb_to_recordset(%(ports)s::jsonb) AS r(device text, port int, port_guid text,
         ts timestamptz, state_id int, phys_state_id int, data jsonb) {guard}
  ON CONFLICT (node_id, device, port) DO UPDATE SET port_guid = EXCLUDED.port_guid,
    ts = EXCLUDED.ts, state_id = EXCLUDED.state_id, phys_state_id = EXCLUDED.phys_state_id,
    data = EXCLUDED.data
  RETURNING 1),
s AS (
  INSERT INTO fleet_telemetrysample (node_id, kind, "key", minute, "values")
  SELECT %(node)s, r.kind, r."key", r.minute, r."values"
    FROM jsonb_to_recordset(%(samples)s::jsonb) AS r(kind text, "key" text,
         minute timestamptz, "values" jsonb) {guard}
  ON CONFLICT DO NOTHING
  RETURNING 1)"""  # noqa: S608 - constant SQL; guard is one of ours


STORE_SQL = f"""WITH {store_ctes()}
SELECT (SELECT count(*) FROM g), (SELECT count(*) FROM p), (SELECT count(*) FROM s)
"""  # noqa: S608 - constant SQL fragments only

Previous = tuple[dict[int, dict[str, Any]], dict[tuple[str, int], dict[str, Any]]]


def previous(node_id: int) -> Previous:
    """The node's latest GPU rows by index and port rows by ``(device, port)``, shaped as
    the ORM path's ``values()`` (a port's ``data`` decoded)."""
    with connection.cursor() as cur:
        cur.execute(PREVIOUS_SQL, {"node": node_id})
        row = cur.fetchone()
    return previous_from(*row) if row else ({}, {})


def previous_from(gpus_json: str | None, ports_json: str | None) -> Previous:
    """``previous`` from the two ``PREVIOUS_COLUMNS`` (JSON text, ``None``: no rows)."""
    gpus: dict[int, dict[str, Any]] = {}
    ports: dict[tuple[str, int], dict[str, Any]] = {}
    for num, ts, healthy, lost, last_xid in jsontext.loads(gpus_json or "[]"):
        gpus[num] = {"index": num, "ts": _datetime(ts), "healthy": healthy, "lost": lost,
                     "last_xid": last_xid}
    for device, num, ts, state, phys, data in jsontext.loads(ports_json or "[]"):
        ports[(device, num)] = {"device": device, "port": num, "ts": _datetime(ts),
                                "state_id": state, "phys_state_id": phys, "data": data}
    return gpus, ports


def _datetime(text: str) -> datetime:
    """A ``timestamptz`` as PostgreSQL writes it in JSON (ISO 8601 with offset)."""
    return datetime.fromisoformat(text)


def _iso(ts: datetime) -> str:
    return ts.isoformat()


def store(node_id: int, gpus: list[dict[str, Any]], ports: list[dict[str, Any]],
          samples: list[SampleRow]) -> None:
    """Upsert the latest rows and insert the history rows in one statement. ``gpus`` and
    ``ports`` hold the columns by name (``ts`` a datetime)."""
    if not (gpus or ports or samples):
        return
    with connection.cursor() as cur:
        cur.execute(STORE_SQL, store_params(node_id, gpus, ports, samples))


def store_params(node_id: int, gpus: list[dict[str, Any]], ports: list[dict[str, Any]],
                 samples: list[SampleRow]) -> dict[str, Any]:
    """The parameters of ``store_ctes``."""
    return {
        "node": node_id,
        "gpus": jsontext.dumps([{**g, "ts": _iso(g["ts"])} for g in gpus]),
        "ports": jsontext.dumps([{**p, "ts": _iso(p["ts"])} for p in ports]),
        "samples": jsontext.dumps([{"kind": kind, "key": key, "minute": _iso(minute),
                                    "values": values}
                                   for kind, key, minute, values in samples]),
    }
