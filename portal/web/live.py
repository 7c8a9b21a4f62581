"""Telemetry of one lease's GPUs and IB ports, shaped for the lease page charts.

Reads what the fleet app stores: the latest sample per GPU and per port, and the
per-minute history since the lease became active. The caller has already passed the
tenant gate for ``lease``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Max

from portal.core import clock
from portal.leasing.models import Allocation, Lease

HISTORY_MINUTES = 30  # what the charts show when the page opens
HISTORY_MAX_MINUTES = 120

ERROR_COUNTERS = ("symbol_error", "port_rcv_errors", "link_downed", "link_error_recovery",
                  "port_rcv_remote_physical_errors", "local_link_integrity_errors",
                  "excessive_buffer_overrun_errors", "port_xmit_discards")


def lease_gpus(lease: Lease) -> list[dict[str, Any]]:
    """The GPUs the lease holds now: node id, hostname, index, UUID, health and ``since``
    (when the lease's allocation of that GPU starts)."""
    rows = (Allocation.objects.filter(lease=lease, live=True)
            .values("node_id", "node__hostname", "gpu__index", "gpu__uuid", "gpu__health")
            .annotate(since=Max("start_at")).order_by("node__hostname", "gpu__index"))
    return [{"node_id": r["node_id"], "host": r["node__hostname"], "index": r["gpu__index"],
             "uuid": r["gpu__uuid"], "health": r["gpu__health"], "since": r["since"]}
            for r in rows]


def _pct(used: Any, total: Any) -> float | None:
    if isinstance(used, int | float) and isinstance(total, int | float) and total:
        return round(100.0 * used / total, 1)
    return None


def _gbps(rate: Any) -> float | None:
    return round(rate * 8 / 1e9, 3) if isinstance(rate, int | float) else None


def _gpu_point(gpu: dict[str, Any], sample: Any) -> dict[str, Any]:
    data = sample.data if sample is not None else {}
    return {
        "key": f"{gpu['host']}/{gpu['index']}",
        "label": f"{gpu['host']} · GPU {gpu['index']}",
        "uuid": gpu["uuid"],
        "util": data.get("gpu_util_pct"),
        "mem": _pct(data.get("memory_used_bytes"), data.get("memory_total_bytes")),
        "temp": data.get("temperature_c"),
        "power": data.get("power_w"),
        "healthy": bool(sample.healthy and not sample.lost) if sample is not None
        else gpu["health"] == "healthy",
        "xid": sample.last_xid if sample is not None else None,
        "ts": sample.ts.isoformat() if sample is not None else None,
    }


def _port_point(host: str, sample: Any) -> dict[str, Any]:
    data = sample.data or {}
    rates = data.get("rates_per_s") or {}
    counters = data.get("counters") or {}
    tx, rx = rates.get("port_xmit_bytes"), rates.get("port_rcv_bytes")
    return {
        "key": f"{host}/{sample.device}:{sample.port}",
        "label": f"{host} · {sample.device}:{sample.port}",
        "tx": _gbps(tx),
        "rx": _gbps(rx),
        "errors": sum(int(counters.get(name) or 0) for name in ERROR_COUNTERS),
        "up": sample.state_id in (None, 4),
        "ts": sample.ts.isoformat(),
    }


def lease_telemetry(lease: Lease, gpus: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """``{"gpus": [...], "ports": [...]}`` with the latest sample of each (3 queries),
    taken no earlier than the lease's activation: the same GPUs and ports served another
    tenant before."""
    gpus = lease_gpus(lease) if gpus is None else gpus
    if not gpus:
        return {"gpus": [], "ports": []}
    try:
        from portal.fleet.models import GpuTelemetry, PortTelemetry
    except ImportError:
        return {"gpus": [_gpu_point(g, None) for g in gpus], "ports": []}
    if lease.active_at is None:  # nothing measured for this lease yet
        return {"gpus": [_gpu_point(g, None) for g in gpus], "ports": []}
    node_ids = {g["node_id"] for g in gpus}
    hosts = {g["node_id"]: g["host"] for g in gpus}
    samples = {(s.node_id, s.index): s
               for s in GpuTelemetry.objects.filter(node_id__in=node_ids,
                                                    ts__gte=lease.active_at)}
    ports = PortTelemetry.objects.filter(node_id__in=node_ids, ts__gte=lease.active_at) \
        .order_by("node_id", "device", "port")
    return {
        "gpus": [_gpu_point(g, _since(samples.get((g["node_id"], g["index"])), g))
                 for g in gpus],
        "ports": [_port_point(hosts[p.node_id], p) for p in ports],
    }


def _since(sample: Any, gpu: dict[str, Any]) -> Any:
    """The latest sample only if taken while this lease held the GPU: an older one is the
    previous holder's (regression: test_live_view_hides_the_previous_holders_sample)."""
    if sample is None or (gpu.get("since") and sample.ts < gpu["since"]):
        return None
    return sample


def lease_history(lease: Lease, gpus: list[dict[str, Any]], telemetry: dict[str, Any],
                  minutes: int = HISTORY_MINUTES) -> dict[str, Any]:
    """The last ``minutes`` (bounded) of per-minute history of the charts in ``telemetry``
    (as :func:`lease_telemetry` returns it for ``gpus``), one query.

    Never older than the lease's activation nor than each GPU's allocation to it: the same
    GPUs carried another tenant's work before. Series are columns: ``t`` (epoch seconds of
    each minute) and one list per chart line; the port error line has no history (the
    stored minutes keep only some of the counters the live line adds up).
    """
    minutes = max(1, min(int(minutes), HISTORY_MAX_MINUTES))
    empty: dict[str, Any] = {"minutes": minutes, "gpus": [], "ports": []}
    if lease.active_at is None or not gpus:
        return empty
    try:
        from portal.fleet.selectors import telemetry_history
    except ImportError:
        return empty
    now = clock.now()
    until = min(now, lease.ended_at) if lease.ended_at else now
    floor = max(now - timedelta(minutes=minutes), lease.active_at)
    node_since: dict[int, datetime] = {}
    wanted = []
    for g in gpus:
        since = max(floor, g["since"]) if g.get("since") else floor
        wanted.append((g["node_id"], g["index"], since))
        node_since[g["node_id"]] = min(since, node_since.get(g["node_id"], since))
    hosts = {g["node_id"]: g["host"] for g in gpus}
    series: dict[str, dict[str, list[Any]]] = {}
    for row in telemetry_history(gpus=wanted, nodes=node_since.items(), until=until):
        values = row["values"] or {}
        if row["kind"] == "gpu":
            point = {"util": values.get("gpu_util_pct"),
                     "mem": _pct(values.get("memory_used_bytes"),
                                 values.get("memory_total_bytes")),
                     "temp": values.get("temperature_c"), "power": values.get("power_w")}
        else:
            point = {"tx": _gbps(values.get("port_xmit_bytes_per_s")),
                     "rx": _gbps(values.get("port_rcv_bytes_per_s"))}
        columns = series.setdefault(f"{hosts[row['node_id']]}/{row['key']}", {"t": []})
        columns["t"].append(int(row["minute"].timestamp()))
        for name, value in point.items():
            columns.setdefault(name, []).append(value)
    return {"minutes": minutes,
            "gpus": [{"key": g["key"], **series[g["key"]]}
                     for g in telemetry["gpus"] if g["key"] in series],
            "ports": [{"key": p["key"], **series[p["key"]]}
                      for p in telemetry["ports"] if p["key"] in series]}


def problems(telemetry: dict[str, Any]) -> list[dict[str, Any]]:
    """Hardware problems on the lease: unhealthy GPUs, XIDs, ports down or erroring."""
    found = []
    for gpu in telemetry["gpus"]:
        if not gpu["healthy"] or gpu.get("xid"):
            found.append({"what": gpu["label"], "kind": "gpu", "xid": gpu.get("xid")})
    for port in telemetry["ports"]:
        if not port["up"] or port["errors"]:
            found.append({"what": port["label"], "kind": "port", "errors": port["errors"],
                          "up": port["up"]})
    return found


def node_problems(gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Unreachable nodes and the fleet's hardware problems on the lease's nodes."""
    try:
        from portal.fleet.selectors import hardware_problems_for, unreachable_node_ids
    except ImportError:
        return []
    hosts = {g["node_id"]: g["host"] for g in gpus}
    if not hosts:
        return []
    found = [{"what": hosts[node_id], "kind": "node"}
             for node_id in sorted(unreachable_node_ids() & set(hosts))]
    for problem in hardware_problems_for(hosts):
        found.append({"what": problem.get("hostname") or hosts.get(problem["node_id"], ""),
                      "kind": "alert", "message": problem.get("message") or problem.get("kind")})
    return found
