"""Synthetic fat-tree clusters for the demo, tests and benchmarks (bulk inserts: fast)."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from django.db import transaction

from portal.core.errors import ApplicationError
from portal.core.services import audit_record
from portal.inventory.catalog import CATALOG, nvlink_domain
from portal.inventory.models import Fabric, Gpu, HcaPort, Node, Switch, SwitchLink
from portal.inventory.services import synthetic_gpu_uuid
from portal.tenants.access import AnyUser

BATCH = 2000


@dataclass(frozen=True)
class ClusterSpec:
    nodes: int
    gpus_per_node: int = 8
    nodes_per_leaf: int = 16
    spines: int = 2
    model: str = "H100"
    prefix: str = "gpu-node"
    fabric: str = "fabric-1"
    hcas_per_node: int = 1
    cpu_cores: int = 112
    memory_gib: int = 2048
    nvlink: str = ""
    start: int = 1

    def validate(self) -> None:
        if self.model not in CATALOG:
            raise ApplicationError(f"unknown model {self.model!r}",
                                   fields={"model": [f"Known: {sorted(CATALOG)}"]})
        for name in ("nodes", "gpus_per_node", "nodes_per_leaf", "spines", "hcas_per_node"):
            if getattr(self, name) < 1:
                raise ApplicationError(f"{name} must be ≥ 1", fields={name: ["Must be ≥ 1."]})


def _guid(kind: int, fabric_id: int, n: int) -> str:
    return f"0x{kind:02x}{fabric_id % 256:02x}{n:012x}"


def _port_guid(kind: int, hostname: str, port: int) -> str:
    """A stable synthetic GUID derived from the hostname (48 bits: collisions negligible)."""
    digest = hashlib.blake2b(f"{hostname}/{port}".encode(), digest_size=6).hexdigest()
    return f"0x{kind:02x}02{digest}"


@transaction.atomic
def cluster_generate(*, actor: AnyUser | None, spec: ClusterSpec) -> dict[str, int]:
    """Create ``spec.nodes`` nodes under leaves under spines. Fails if a hostname exists."""
    spec.validate()
    hostnames = [f"{spec.prefix}-{i:04d}" for i in range(spec.start, spec.start + spec.nodes)]
    if Node.objects.filter(hostname__in=hostnames[:1] + hostnames[-1:]).exists():
        raise ApplicationError("hostnames already exist",
                               fields={"prefix": ["Nodes with this prefix already exist."]})
    fabric, _ = Fabric.objects.get_or_create(name=spec.fabric)
    base = Switch.objects.filter(fabric=fabric).count()
    n_leaves = math.ceil(spec.nodes / spec.nodes_per_leaf)
    ports = spec.nodes_per_leaf * spec.hcas_per_node + spec.spines
    leaves = Switch.objects.bulk_create([
        Switch(fabric=fabric, guid=_guid(0x5E, fabric.pk, base + i), role=Switch.Role.LEAF,
               description=f"{spec.fabric} leaf {base + i + 1:03d}", ports=ports)
        for i in range(n_leaves)], batch_size=BATCH)
    spines = Switch.objects.bulk_create([
        Switch(fabric=fabric, guid=_guid(0x5F, fabric.pk, base + n_leaves + s),
               role=Switch.Role.SPINE, description=f"{spec.fabric} spine {base + s + 1:03d}",
               ports=max(n_leaves, 1)) for s in range(spec.spines)], batch_size=BATCH)
    SwitchLink.objects.bulk_create([
        SwitchLink(fabric=fabric, a=leaf, a_port=ports - spec.spines + s + 1, b=spine,
                   b_port=li + 1, speed="4xNDR")
        for li, leaf in enumerate(leaves) for s, spine in enumerate(spines)], batch_size=BATCH)
    nodes = Node.objects.bulk_create([
        Node(hostname=h, fabric=fabric, leaf=leaves[i // spec.nodes_per_leaf],
             cpu_milli=spec.cpu_cores * 1000, memory_mib=spec.memory_gib * 1024,
             gpu_model=spec.model) for i, h in enumerate(hostnames)], batch_size=BATCH)
    layout = spec.nvlink or CATALOG[spec.model].nvlink
    memory = CATALOG[spec.model].memory_mib
    Gpu.objects.bulk_create([
        Gpu(node=node, index=g, uuid=synthetic_gpu_uuid(node.hostname, g), model=spec.model,
            memory_mib=memory, nvlink_domain=nvlink_domain(layout, g),
            pci_bus_id=f"00000000:{0x18 + g * 0x10:02X}:00.0")
        for node in nodes for g in range(spec.gpus_per_node)], batch_size=BATCH)
    HcaPort.objects.bulk_create([
        HcaPort(node=node, fabric=fabric, device=f"mlx5_{p}", port_number=1,
                node_guid=_port_guid(0xCA, node.hostname, p),
                port_guid=_port_guid(0xCB, node.hostname, p),
                rate="400 Gb/sec (4X NDR)", description=f"{node.hostname} mlx5_{p}",
                switch=node.leaf,
                switch_port=(i % spec.nodes_per_leaf) * spec.hcas_per_node + p + 1)
        for i, node in enumerate(nodes) for p in range(spec.hcas_per_node)], batch_size=BATCH)
    counts = {"nodes": len(nodes), "gpus": len(nodes) * spec.gpus_per_node,
              "leaves": n_leaves, "spines": spec.spines,
              "hca_ports": len(nodes) * spec.hcas_per_node}
    audit_record(actor=actor, action="inventory.generate_cluster", obj=fabric, changes=counts)
    return counts
