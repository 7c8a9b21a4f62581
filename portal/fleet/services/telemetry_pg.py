"""A node report's telemetry on PostgreSQL in two round trips, without the ORM.

``previous`` reads the node's latest GPU and port rows in one statement; ``store`` writes
the new latest rows (upserts) and the new per-minute history rows (insert, a minute already
stored is kept) in ONE statement: data-modifying CTEs over ``jsonb_to_recordset`` of one
JSON parameter each, encoded once (``core.jsontext``). The rows and their conflict rules are
those of the portable ORM path (``ingest._upsert_*``, ``samples.samples_store``).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.db import connection

from portal.core import jsontext
from portal.fleet.models import GpuTelemetry, PortTelemetry, TelemetrySample
from portal.fleet.services.samples import SampleRow

assert (GpuTelemetry._meta.db_table, PortTelemetry._meta.db_table,
        TelemetrySample._meta.db_table) == (
    "fleet_gputelemetry", "fleet_porttelemetry", "fleet_telemetrysample")

PREVIOUS_SQL = """
SELECT 'g', "index", '', ts, healthy, lost, last_xid, NULL::smallint, NULL::smallint,
       NULL::jsonb
  FROM fleet_gputelemetry WHERE node_id = %(node)s
UNION ALL
SELECT 'p', port, device, ts, NULL, NULL, NULL, state_id, phys_state_id, data
  FROM fleet_porttelemetry WHERE node_id = %(node)s
"""

STORE_SQL = """
WITH g AS (
  INSERT INTO fleet_gputelemetry (node_id, "index", uuid, ts, healthy, lost, last_xid, data)
  SELECT %(node)s, r."index", r.uuid, r.ts, r.healthy, r.lost, r.last_xid, r.data
    FROM jsonb_to_recordset(%(gpus)s::jsonb) AS r("index" int, uuid text, ts timestamptz,
         healthy bool, lost bool, last_xid int, data jsonb)
  ON CONFLICT (node_id, "index") DO UPDATE SET uuid = EXCLUDED.uuid, ts = EXCLUDED.ts,
    healthy = EXCLUDED.healthy, lost = EXCLUDED.lost, last_xid = EXCLUDED.last_xid,
    data = EXCLUDED.data
  RETURNING 1),
p AS (
  INSERT INTO fleet_porttelemetry (node_id, device, port, port_guid, ts, state_id,
                                   phys_state_id, data)
  SELECT %(node)s, r.device, r.port, r.port_guid, r.ts, r.state_id, r.phys_state_id, r.data
    FROM jsonb_to_recordset(%(ports)s::jsonb) AS r(device text, port int, port_guid text,
         ts timestamptz, state_id int, phys_state_id int, data jsonb)
  ON CONFLICT (node_id, device, port) DO UPDATE SET port_guid = EXCLUDED.port_guid,
    ts = EXCLUDED.ts, state_id = EXCLUDED.state_id, phys_state_id = EXCLUDED.phys_state_id,
    data = EXCLUDED.data
  RETURNING 1),
s AS (
  INSERT INTO fleet_telemetrysample (node_id, kind, "key", minute, "values")
  SELECT %(node)s, r.kind, r."key", r.minute, r."values"
    FROM jsonb_to_recordset(%(samples)s::jsonb) AS r(kind text, "key" text,
         minute timestamptz, "values" jsonb)
  ON CONFLICT DO NOTHING
  RETURNING 1)
SELECT (SELECT count(*) FROM g), (SELECT count(*) FROM p), (SELECT count(*) FROM s)
"""

Previous = tuple[dict[int, dict[str, Any]], dict[tuple[str, int], dict[str, Any]]]


def previous(node_id: int) -> Previous:
    """The node's latest GPU rows by index and port rows by ``(device, port)``, shaped as
    the ORM path's ``values()`` (a port's ``data`` decoded)."""
    gpus: dict[int, dict[str, Any]] = {}
    ports: dict[tuple[str, int], dict[str, Any]] = {}
    with connection.cursor() as cur:
        cur.execute(PREVIOUS_SQL, {"node": node_id})
        rows = cur.fetchall()
    for kind, num, device, ts, healthy, lost, last_xid, state, phys, data in rows:
        if kind == "g":
            gpus[num] = {"index": num, "ts": ts, "healthy": healthy, "lost": lost,
                         "last_xid": last_xid}
        else:
            ports[(device, num)] = {"device": device, "port": num, "ts": ts, "state_id": state,
                                    "phys_state_id": phys,
                                    "data": json.loads(data) if data is not None else None}
    return gpus, ports


def _iso(ts: datetime) -> str:
    return ts.isoformat()


def store(node_id: int, gpus: list[dict[str, Any]], ports: list[dict[str, Any]],
          samples: list[SampleRow]) -> None:
    """Upsert the latest rows and insert the history rows in one statement. ``gpus`` and
    ``ports`` hold the columns by name (``ts`` a datetime)."""
    if not (gpus or ports or samples):
        return
    params = {
        "node": node_id,
        "gpus": jsontext.dumps([{**g, "ts": _iso(g["ts"])} for g in gpus]),
        "ports": jsontext.dumps([{**p, "ts": _iso(p["ts"])} for p in ports]),
        "samples": jsontext.dumps([{"kind": kind, "key": key, "minute": _iso(minute),
                                    "values": values}
                                   for kind, key, minute, values in samples]),
    }
    with connection.cursor() as cur:
        cur.execute(STORE_SQL, params)
