"""Test builders (like Kubernetes' MakePod()...Obj()): small named topologies."""

from __future__ import annotations

from scheduler import (
    Gpu,
    Lease,
    Node,
    NodeAllocation,
    Placement,
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


def as_lease(d: Placement, tenant: str = "t1",
             priority: PriorityClass = PriorityClass.ON_DEMAND) -> Lease:
    """The lease a placement becomes once the portal writes it back."""
    return Lease(d.request_id, tenant, priority, d.parts, d.start, d.end, d.borrowed, d.model)


def busy_leaves(leaves: int = 7, per_leaf: int = 8, free_leaf: int = 0,
                busy_gpus: int = 8) -> tuple[Snapshot, Topology]:
    """Finding 11.1's cluster: one leaf wholly free, one busy node on every other leaf."""
    nodes, topo = hgx_cluster(leaves=leaves, per_leaf=per_leaf)
    held = tuple(lease(f"busy{leaf}", f"n{leaf:02d}00", list(range(busy_gpus)))
                 for leaf in range(leaves) if leaf != free_leaf)
    return snap(nodes, topo, leases=held), topo


def waiting_gang_case(extra: tuple[Lease, ...] = ()) -> Snapshot:
    """2 leaves × 4 nodes. leaf0: n0000/n0001 idle, n0002/n0003 busy until 100;
    leaf1: n0100–n0102 busy until 900, n0103 idle. A 4-node leaf gang fits no leaf now;
    leaf0 frees soonest (t=100). Shared by the hold and the reserve tests."""
    nodes, topo = hgx_cluster(leaves=2, per_leaf=4)
    busy = (lease("a", "n0002", list(range(8)), end=100),
            lease("b", "n0003", list(range(8)), end=100),
            *(lease(f"c{k}", f"n010{k}", list(range(8)), end=900) for k in range(3)),
            *extra)
    return snap(nodes, topo, leases=busy)
