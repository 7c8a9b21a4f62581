"""The invariants a restored (or any) database must hold, as reads: ``manage.py
restore_check`` runs them after a restore, before the portal takes traffic again.

Each check returns at most a few examples of what is wrong (empty: it holds):

- ``double_booked``: a GPU slot in two live allocations at overlapping times;
- ``running_on_failed_hardware``: a running lease with a live slot on hardware that is not
  kept by leases (out of service or validating: ``portal.fleet.lifecycle``);
- ``state_without_event``: a lease whose state is not the one its last transition entered
  (every state change writes its event in the same transaction);
- ``usage_gap``: a lease's hourly usage records with a missing hour between two of them;
- ``orphan_grants``: a host that still reports a lease login that no granting lease of the
  restored database has (granted after the backup): the next report resyncs the host
  (``portal.fleet.services.restore``); until it has, it is listed here.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import connection

Check = Callable[[], list[str]]



def _rows(sql: str) -> list[tuple[object, ...]]:
    with connection.cursor() as cur:
        cur.execute(sql)
        return list(cur.fetchall())


def double_booked() -> list[str]:
    return [f"GPU {g} slot {s}: leases {a} and {b}" for g, s, a, b in _rows("""
        SELECT a.gpu_id, a.slot, a.lease_id, b.lease_id FROM leasing_allocation a
        JOIN leasing_allocation b ON a.gpu_id = b.gpu_id AND a.slot = b.slot AND a.id < b.id
         AND a.live AND b.live AND a.start_at < b.end_at AND b.start_at < a.end_at
        LIMIT 5""")]


def running_on_failed_hardware() -> list[str]:
    return [f"lease {lease} on {host} GPU {index}" for lease, host, index in _rows("""
        SELECT DISTINCT a.lease_id, n.hostname, g.index FROM leasing_allocation a
        JOIN leasing_lease l ON l.id = a.lease_id JOIN inventory_gpu g ON g.id = a.gpu_id
        JOIN inventory_node n ON n.id = a.node_id
        WHERE a.live AND l.state IN ('active', 'notice')
          AND (g.service NOT IN ('in_service', 'suspect')
               OR n.service NOT IN ('in_service', 'suspect'))
        LIMIT 5""")]


def state_without_event() -> list[str]:
    return [f"lease {lease} is {state}, its last transition entered {last}"
            for lease, state, last in _rows("""
        SELECT l.id, l.state, e.to_state FROM leasing_lease l
        JOIN LATERAL (SELECT to_state FROM leasing_leaseevent
                      WHERE lease_id = l.id AND kind = 'transition'
                      ORDER BY created DESC, id DESC LIMIT 1) e ON true
        WHERE e.to_state <> l.state LIMIT 5""")]


def usage_gap() -> list[str]:
    return [f"lease {lease}: no usage between {prev} and {start}"
            for lease, prev, start in _rows("""
        SELECT lease_id, prev_end, period_start FROM (
          SELECT lease_id, period_start,
                 lag(period_end) OVER (PARTITION BY lease_id ORDER BY period_start) AS prev_end
          FROM billing_usagerecord) r
        WHERE prev_end IS NOT NULL AND prev_end <> period_start LIMIT 5""")]


def orphan_grants() -> list[str]:
    return [f"{host} still grants {tag}" for host, tag in _rows("""
        SELECT n.hostname, g->>'lease_id' FROM fleet_nodeobservedstate o
        JOIN inventory_node n ON n.id = o.node_id
        CROSS JOIN LATERAL jsonb_array_elements(
            CASE WHEN jsonb_typeof(o.document->'access_grants') = 'array'
                 THEN o.document->'access_grants' ELSE '[]'::jsonb END) g
        WHERE coalesce(g->>'state', 'present') = 'present'
          AND NOT EXISTS (SELECT 1 FROM leasing_lease l
                          WHERE 'ls_' || left(replace(l.id::text, '-', ''), 16) = g->>'lease_id'
                            AND l.state IN ('provisioning', 'active', 'notice', 'releasing'))
        LIMIT 5""")]


CHECKS: dict[str, Check] = {
    "double_booked": double_booked,
    "running_on_failed_hardware": running_on_failed_hardware,
    "state_without_event": state_without_event,
    "usage_gap": usage_gap,
    "orphan_grants": orphan_grants,
}


def run() -> dict[str, list[str]]:
    """Every check's examples of what is wrong (PostgreSQL)."""
    return {name: check() for name, check in CHECKS.items()}
