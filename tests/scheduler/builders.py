"""Test builders (like Kubernetes' MakePod()...Obj()): small named topologies."""

from __future__ import annotations

from scheduler import (
    Gpu,
    Lease,
    Node,
    NodeAllocation,
    PriorityClass,
    Request,
    Snapshot,
    Topology,
)


def node(name: str, model: str = "H100", gpus: int = 8, domains: int = 1,
         cpu: int = 128_000, mem: int = 1_048_576, **kw: object) -> Node:
    per = max(1, gpus // domains)
    return Node(name, cpu, mem,
                tuple(Gpu(i, model, 81_920, nvlink_domain=i // per) for i in range(gpus)),
                **kw)  # type: ignore[arg-type]


def hgx_cluster(leaves: int = 2, per_leaf: int = 4, spines: int = 1,
                model: str = "H100") -> tuple[tuple[Node, ...], Topology]:
    """``leaves`` leaf switches of ``per_leaf`` 8-GPU HGX nodes, leaves over spines."""
    nodes = []
    parent: dict[str, str] = {}
    for leaf in range(leaves):
        for k in range(per_leaf):
            name = f"n{leaf:02d}{k:02d}"
            nodes.append(node(name, model))
            parent[name] = f"leaf{leaf}"
        parent[f"leaf{leaf}"] = f"spine{leaf % spines}"
    for s in range(spines):
        parent[f"spine{s}"] = "core"
    return tuple(nodes), Topology(parent)


def req(rid: str, tenant: str = "t1", **kw: object) -> Request:
    return Request(rid, tenant, **kw)  # type: ignore[arg-type]


def lease(lid: str, node_name: str, gpus: list[int], milli: int = 1000,
          tenant: str = "t1", start: int = 0, end: int | None = None,
          priority: PriorityClass = PriorityClass.ON_DEMAND, borrowed: bool = False,
          model: str = "H100", cpu: int = 0, mem: int = 0) -> Lease:
    part = NodeAllocation(node_name, tuple((g, milli) for g in gpus), cpu, mem)
    return Lease(lid, tenant, priority, (part,), start, end, borrowed, model)


def snap(nodes: tuple[Node, ...], topology: Topology | None = None, **kw: object) -> Snapshot:
    return Snapshot(nodes, topology or Topology(), **kw)  # type: ignore[arg-type]
