"""The generated HGX cluster and queue of the core's benchmarks (``latency``, ``passbench``).

Each cluster is 8-GPU HGX nodes, 32 per leaf, 16 leaves per spine, pre-filled to about
40% with on-demand and spot leases; a queue (fractional, 1/2/4/8 GPUs, a few 2-4 node
gangs) of requests to decide.
"""

from __future__ import annotations

import random

from scheduler.model import (
    Gpu,
    Lease,
    Node,
    NodeAllocation,
    PriorityClass,
    Request,
    Snapshot,
    Topology,
)


def cluster(n: int, per_leaf: int = 32, leaves_per_spine: int = 16) -> Snapshot:
    nodes = []
    parent: dict[str, str] = {}
    for i in range(n):
        name = f"hgx-{i:05d}"
        nodes.append(Node(name, 224_000, 2_097_152,
                          tuple(Gpu(g, "H100", 81_920) for g in range(8))))
        leaf = i // per_leaf
        parent[name] = f"leaf-{leaf}"
        parent[f"leaf-{leaf}"] = f"spine-{leaf // leaves_per_spine}"
    return Snapshot(tuple(nodes), Topology(parent))


def prefill(snap: Snapshot, rng: random.Random, share: float = 0.4) -> Snapshot:
    leases = []
    for i, node in enumerate(snap.nodes):
        k = sum(1 for _ in range(8) if rng.random() < share)
        if k:
            prio = PriorityClass.SPOT if rng.random() < 0.25 else PriorityClass.ON_DEMAND
            part = NodeAllocation(node.name, tuple((g, 1000) for g in range(k)),
                                  k * 8000, k * 65_536)
            leases.append(Lease(f"pre-{i}", f"t{i % 7}", prio, (part,), 0,
                                rng.randrange(3600, 86_400), model="H100"))
    return Snapshot(snap.nodes, snap.topology, tuple(leases))


def queue(count: int, rng: random.Random) -> list[Request]:
    out = []
    for i in range(count):
        roll = rng.random()
        gpus, milli, nodes = 1, 1000, 1
        if roll < 0.35:
            milli = rng.choice((250, 300, 500, 700))
        elif roll < 0.6:
            gpus = 1
        elif roll < 0.8:
            gpus = rng.choice((2, 4))
        elif roll < 0.98:
            gpus = 8
        else:
            gpus, nodes = 8, rng.choice((2, 4))
        out.append(Request(f"r{i}", f"t{rng.randrange(7)}", PriorityClass.ON_DEMAND, gpus,
                           milli, cpu_milli=gpus * 8000, memory_mib=gpus * 65_536,
                           nodes=nodes, start=0, end=rng.randrange(600, 28_800),
                           submitted_at=i))
    return out
