"""Builders for fleet tests: nodes, reports, enrolment bodies."""

from __future__ import annotations

import time
from typing import Any

from agents import __version__ as AGENT_VERSION
from portal.inventory.models import Gpu, HcaPort, Node


def make_node(hostname: str = "gpu-node-01", gpus: int = 2) -> Node:
    node = Node.objects.create(hostname=hostname, gpu_model="H100")
    for i in range(gpus):
        Gpu.objects.create(node=node, index=i, uuid=f"GPU-{hostname}-{i}", model="H100",
                           memory_mib=81559)
    HcaPort.objects.create(node=node, device="mlx5_0", port_number=1,
                           port_guid=guid(node.pk))
    return node


def guid(n: int) -> str:
    return f"0x{0x0002c90300000000 + n:016x}"


def gpu(index: int, **extra: Any) -> dict[str, Any]:
    return {"index": index, "uuid": f"GPU-x-{index}", "name": "NVIDIA H100 80GB HBM3",
            "healthy": True, "gpu_util_pct": 50, "memory_used_bytes": 1 << 30,
            "power_w": 300.5, "temperature_c": 40, **extra}


def port(n: int = 1, **extra: Any) -> dict[str, Any]:
    return {"device": "mlx5_0", "port": 1, "port_guid": guid(n), "state": "ACTIVE",
            "state_id": 4, "phys_state": "LinkUp", "phys_state_id": 5, "rate_gbps": 400.0,
            "link_layer": "InfiniBand", "lid": 7, "pkeys": ["0xffff"],
            "counters": {"link_downed": 0, "symbol_error": 0, "port_rcv_errors": 0},
            "saturated": [], **extra}


def sample(ts: float | None = None, gpus: list[dict[str, Any]] | None = None,
           ports: list[dict[str, Any]] | None = None,
           xids: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"ts": ts if ts is not None else time.time(),
            "host": {"hostname": "gpu-node-01"},
            "gpu_system": {"available": True},
            "gpus": gpus if gpus is not None else [gpu(0), gpu(1)],
            "ib_ports": ports if ports is not None else [port()],
            "xid_events": xids or []}


def report(node_id: str, seq: int, telemetry: list[dict[str, Any]] | None = None,
           generation_applied: int = 0, **extra: Any) -> dict[str, Any]:
    return {"protocol": 1, "node_id": node_id, "seq": seq,
            "created_at": "2026-11-29T23:40:00+00:00", "agent_version": AGENT_VERSION,
            "dropped_reports": 0,
            "observed": {"generation_applied": generation_applied, "partitions": []},
            "telemetry": telemetry if telemetry is not None else [sample()], **extra}
