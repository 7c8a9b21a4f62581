"""Simulated node agents for the demo: telemetry through the real ingestion path.

Every report is built exactly as a node agent would send it (protocol v1), validated by
the same validator as the agent API, and stored by the same service — so the lease pages'
live charts, health and showback run on the demo exactly as on real hardware.
"""

from __future__ import annotations

import math
import zlib
from collections import defaultdict
from datetime import datetime
from typing import Any

from portal.core import clock
from portal.fleet import protocol
from portal.fleet.models import NodeDesiredState
from portal.fleet.services import agent_for_node
from portal.fleet.services.ingest import report_ingest
from portal.inventory.catalog import CATALOG
from portal.inventory.models import Gpu, HcaPort, Node
from portal.leasing import states
from portal.leasing.models import Allocation

MIB = 1024 * 1024


def _wave(key: str, t: float, low: float, high: float) -> float:
    phase = (zlib.crc32(key.encode()) % 628) / 100
    return low + (high - low) * (0.5 + 0.5 * math.sin(t / 45 + phase))


def _gpu_sample(gpu: Gpu, busy: bool, t: float) -> dict[str, Any]:
    total = gpu.memory_mib * MIB
    util = _wave(gpu.uuid, t, 62, 98) if busy else 0.0
    return {
        "index": gpu.index, "uuid": gpu.uuid, "pci_bus_id": gpu.pci_bus_id or "00000000:00:00.0",
        "name": CATALOG[gpu.model].display if gpu.model in CATALOG else gpu.model,
        "healthy": True, "gpu_util_pct": round(util), "mem_util_pct": round(util * 0.6),
        "memory_total_bytes": total,
        "memory_used_bytes": int(total * (_wave(gpu.uuid + "m", t, 0.55, 0.9) if busy else 0.01)),
        "temperature_c": round(34 + util * 0.4), "power_w": round(70 + util * 6.2, 1),
        "sm_clock_mhz": 1980 if busy else 345, "mem_clock_mhz": 2619,
    }


def _port_sample(port: HcaPort, busy: bool, t: float) -> dict[str, Any]:
    rate = _wave(port.port_guid, t, 8e9, 4.2e10) if busy else 1e5
    return {
        "device": port.device or "mlx5_0", "port": port.port_number,
        "port_guid": port.port_guid, "state": "ACTIVE", "state_id": 4,
        "phys_state": "LinkUp", "phys_state_id": 5, "rate_gbps": 400.0,
        "link_layer": "InfiniBand", "counters": {}, "counters_64bit": True, "saturated": [],
        "rates_per_s": {"port_xmit_bytes": rate, "port_rcv_bytes": rate * 0.97},
    }


def _observed(node: Node, generation: int) -> dict[str, Any]:
    return {"generation_applied": generation, "generation_seen": generation,
            "apply_errors": [], "partitions": [], "ipoib_children": [], "access_grants": []}


def report_for(node: Node, gpus: list[Gpu], ports: list[HcaPort], busy: set[int],
               seq: int, now: datetime, generation: int, agent_id: str) -> dict[str, Any]:
    t = now.timestamp()
    return {
        "protocol": protocol.PROTOCOL_VERSION, "node_id": agent_id, "seq": seq,
        "created_at": now.isoformat(), "agent_version": "sim-1", "dropped_reports": 0,
        "observed": _observed(node, generation),
        "telemetry": [{
            "ts": t, "host": {"hostname": node.hostname},
            "gpu_system": {"available": True, "driver_version": "550.90.07"},
            "gpus": [_gpu_sample(g, g.pk in busy, t) for g in gpus],
            "ib_ports": [_port_sample(p, bool(busy), t) for p in ports],
            "xid_events": [],
        }],
    }


def simulate_telemetry(max_nodes: int = 200) -> int:
    """One report from each node that carries an active lease (bounded per round)."""
    busy: dict[int, set[int]] = defaultdict(set)
    for node_id, gpu_id in Allocation.objects.filter(
            live=True, lease__state__in=sorted(states.RUNNING)).values_list("node_id", "gpu_id"):
        busy[node_id].add(gpu_id)
    nodes = list(Node.objects.filter(pk__in=list(busy)[:max_nodes]))
    gpus: dict[int, list[Gpu]] = defaultdict(list)
    for gpu in Gpu.objects.filter(node__in=nodes).order_by("index"):
        gpus[gpu.node_id].append(gpu)
    ports: dict[int, list[HcaPort]] = defaultdict(list)
    for port in HcaPort.objects.filter(node__in=nodes):
        ports[port.node_id].append(port)
    generations = dict(NodeDesiredState.objects.filter(node__in=nodes).values_list(
        "node_id", "generation"))
    now = clock.now()
    for node in nodes:
        agent = agent_for_node(node=node)
        body = report_for(node, gpus[node.pk], ports[node.pk], busy[node.pk],
                          agent.last_seq + 1, now, generations.get(node.pk, 0), agent.agent_id)
        problems = protocol.validate_report(body)
        if problems:
            raise ValueError(f"simulated report is invalid: {problems[:3]}")
        report_ingest(agent=agent, body=body)
    return len(nodes)
