"""Named fabric builders (test topologies and benchmark fabrics), as graphs.

- :func:`fat_tree_2tier`: leaves × nodes, every leaf cabled to every spine;
- :func:`fat_tree_3tier`: pods of leaves and aggregation switches (every leaf to every
  aggregation switch of its pod), aggregation switch ``k`` of each pod to core group ``k``;
- :func:`superpod`: NVIDIA DGX SuperPOD-style rail-optimised scalable units (SU): each
  node's HCA ``r`` is cabled to the SU's rail-``r`` leaf, and rail-``r`` leaves of every SU
  to the rail-``r`` spines, so each rail is its own plane.

Nodes are HGX-like: ``gpus`` GPUs of ``model`` in one NVLink domain.
"""

from __future__ import annotations

from scheduler.model import Gpu, Node, Topology


def hgx(name: str, gpus: int = 8, model: str = "H100", cpu_milli: int = 224_000,
        memory_mib: int = 2_097_152) -> Node:
    return Node(name, cpu_milli, memory_mib,
                tuple(Gpu(g, model, 81_920) for g in range(gpus)))


def fat_tree_2tier(leaves: int, per_leaf: int, spines: int = 2, gpus: int = 8,
                   model: str = "H100") -> tuple[tuple[Node, ...], Topology]:
    nodes, parent = [], {}
    for leaf in range(leaves):
        for k in range(per_leaf):
            name = f"l{leaf:02d}n{k:02d}"
            nodes.append(hgx(name, gpus, model))
            parent[name] = f"leaf{leaf:02d}"
    links = tuple((f"leaf{leaf:02d}", f"spine{s:02d}")
                  for leaf in range(leaves) for s in range(spines))
    return tuple(nodes), Topology(parent=parent, links=links)


def fat_tree_3tier(pods: int, leaves_per_pod: int, per_leaf: int, aggs_per_pod: int = 2,
                   cores_per_group: int = 1, gpus: int = 8, model: str = "H100",
                   ) -> tuple[tuple[Node, ...], Topology]:
    nodes, parent, links = [], {}, []
    for pod in range(pods):
        for leaf in range(leaves_per_pod):
            lname = f"p{pod}leaf{leaf:02d}"
            for k in range(per_leaf):
                name = f"p{pod}l{leaf:02d}n{k:02d}"
                nodes.append(hgx(name, gpus, model))
                parent[name] = lname
            links += [(lname, f"p{pod}agg{a}") for a in range(aggs_per_pod)]
        for a in range(aggs_per_pod):
            links += [(f"p{pod}agg{a}", f"core{a}.{c}") for c in range(cores_per_group)]
    return tuple(nodes), Topology(parent=parent, links=tuple(links))


def superpod(units: int = 1, nodes_per_unit: int = 32, rails: int = 8,
             spines_per_rail: int = 1, gpus: int = 8, model: str = "H100",
             ) -> tuple[tuple[Node, ...], Topology]:
    nodes, attach, links = [], {}, []
    for su in range(units):
        for k in range(nodes_per_unit):
            name = f"su{su}n{k:02d}"
            nodes.append(hgx(name, gpus, model))
            attach[name] = tuple(f"su{su}rail{r}" for r in range(rails))
        links += [(f"su{su}rail{r}", f"rail{r}spine{s}")
                  for r in range(rails) for s in range(spines_per_rail)]
    return tuple(nodes), Topology(attach=attach, links=tuple(links))
