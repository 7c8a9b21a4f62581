"""Orders that can never be placed, whatever ends: refuse them at the door (issue 11.3).

``never_fits(request, snapshot)`` compares a request with the hardware only (every node
and GPU, whatever its state or health today: a node down for maintenance comes back), so
it refuses only what no future state of the pool can hold, and says why in structured
form: which limit, which request field, what was asked and the most the pool offers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from scheduler.model import Locality, LocalityLevel, Node, Request, Snapshot, Topology


class Limit(StrEnum):
    MODEL = "model"  # the pool has no GPU of the allowed models
    POOL_GPUS = "pool_gpus"  # more GPUs than the pool has (of those models)
    NODE_GPUS = "node_gpus"  # more GPUs per node than the largest node has
    NVLINK = "nvlink"  # more GPUs than the largest NVLink domain (NVLink required)
    NODE_CPU = "node_cpu"  # more CPU per node than any node that holds the GPUs
    NODE_MEMORY = "node_memory"  # more memory per node than any such node
    POOL_NODES = "pool_nodes"  # fewer nodes that hold the per-node shape than asked
    LOCAL_NODES = "local_nodes"  # no leaf (or switch within max_hops) holds that many


@dataclass(frozen=True)
class NeverFits:
    limit: Limit
    field: str  # the Request field to change: gpus, nodes, models, cpu_milli, memory_mib
    asked: int
    most: int  # the most the pool can ever offer for that field
    models: tuple[str, ...]  # the GPU models considered (sorted)

    @property
    def detail(self) -> str:
        models = "/".join(self.models) or "any"
        return {
            Limit.MODEL: "the pool has no GPU of the allowed models",
            Limit.POOL_GPUS: f"the pool holds {self.most} {models} GPUs",
            Limit.NODE_GPUS: f"the largest {models} node has {self.most} GPUs",
            Limit.NVLINK: f"the largest NVLink domain has {self.most} GPUs",
            Limit.NODE_CPU: f"the most CPU on a node that fits is {self.most} milli",
            Limit.NODE_MEMORY: f"the most memory on a node that fits is {self.most} MiB",
            Limit.POOL_NODES: f"the pool has {self.most} {models} nodes that fit",
            Limit.LOCAL_NODES: f"no leaf holds {self.asked} {models} nodes "
                               f"(at most {self.most})",
        }[self.limit]


def never_fits(request: Request, snapshot: Snapshot) -> NeverFits | None:
    """Why ``request`` can never be placed on ``snapshot``'s hardware, or None."""
    nodes = [n for n in snapshot.nodes
             if request.gpus == 0 or (n.gpus and (not request.models
                                                  or n.model in request.models))]
    models = tuple(sorted({n.model for n in nodes if n.model}))

    def refuse(limit: Limit, field: str, asked: int, most: int) -> NeverFits:
        return NeverFits(limit, field, asked, most, models)

    if not nodes:
        return refuse(Limit.MODEL, "models", request.gpus * request.nodes, 0)
    pool = sum(len(n.gpus) for n in nodes)
    if request.gpus and pool < request.gpus * request.nodes:
        return refuse(Limit.POOL_GPUS, "gpus", request.gpus * request.nodes, pool)
    per_node = max(len(n.gpus) for n in nodes)
    if per_node < request.gpus:
        return refuse(Limit.NODE_GPUS, "gpus", request.gpus, per_node)
    hosts = [n for n in nodes if len(n.gpus) >= request.gpus]
    if _nvlink_required(request.locality):
        biggest = max(_largest_domain(n) for n in hosts)
        if biggest < request.gpus:
            return refuse(Limit.NVLINK, "gpus", request.gpus, biggest)
        hosts = [n for n in hosts if _largest_domain(n) >= request.gpus]
    cpu = max(n.cpu_milli for n in hosts)
    if cpu < request.cpu_milli:
        return refuse(Limit.NODE_CPU, "cpu_milli", request.cpu_milli, cpu)
    hosts = [n for n in hosts if n.cpu_milli >= request.cpu_milli]
    mem = max(n.memory_mib for n in hosts)
    if mem < request.memory_mib:
        return refuse(Limit.NODE_MEMORY, "memory_mib", request.memory_mib, mem)
    hosts = [n for n in hosts if n.memory_mib >= request.memory_mib]
    if len(hosts) < request.nodes:
        return refuse(Limit.POOL_NODES, "nodes", request.nodes, len(hosts))
    local = _most_local(hosts, snapshot.topology, request.locality)
    if request.nodes > 1 and local is not None and local < request.nodes:
        return refuse(Limit.LOCAL_NODES, "nodes", request.nodes, local)
    return None


def _nvlink_required(locality: Locality | None) -> bool:
    return locality is not None and locality.required and locality.level == LocalityLevel.NVLINK


def _largest_domain(node: Node) -> int:
    sizes: dict[int, int] = {}
    for g in node.gpus:
        sizes[g.nvlink_domain] = sizes.get(g.nvlink_domain, 0) + 1
    return max(sizes.values(), default=0)


def _most_local(hosts: Sequence[Node], topology: Topology,
                locality: Locality | None) -> int | None:
    """Most hosts under one switch of the level a *required* locality allows (None: the
    locality is not required, any spread is allowed)."""
    if locality is None or not locality.required:
        return None
    if locality.level == LocalityLevel.SPINE:
        if locality.max_hops is None:
            return None
        level = locality.max_hops
    else:
        level = 0
    groups: dict[str, int] = {}
    for n in hosts:
        for key in topology.groups(n.name, level):
            groups[key] = groups.get(key, 0) + 1
    return max(groups.values(), default=0)

