"""The switch graph of an InfiniBand fabric: every uplink kept, distances by BFS.

A fat tree is not a tree of switches: every leaf has uplinks to several spines (and, in
a 3-tier fabric, every spine to several cores), and in a rail-optimised design (NVIDIA
DGX SuperPOD) each node's HCAs sit on different leaves, one per rail. So a node attaches
to one or more leaves, and switches form an undirected graph.

- A node's *local group* (level 0) is the set of leaves it attaches to: nodes on the same
  leaf, or on the same rail leaves (one scalable unit), talk through one switch hop.
- Two nodes are ``ceil(d / 2)`` *levels* apart, ``d`` being the fewest switch-to-switch
  links between a leaf of one and a leaf of the other (same leaf: 0; leaf-spine-leaf: 1;
  leaf-spine-core-spine-leaf: 2), as the tree model counted levels.
- The *groups at level L* of a node are the switches within ``L`` links of one of its
  leaves: nodes sharing such a group are at most ``L`` levels apart, and any two nodes at
  most ``L`` levels apart share one (the middle switch of a shortest path).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping

ROOT = "<root>"


class SwitchGraph:
    def __init__(self, parent: Mapping[str, str], links: Iterable[tuple[str, str]],
                 attach: Mapping[str, tuple[str, ...]]) -> None:
        edges = list(links)
        switches = {s for edge in edges for s in edge} | set(parent.values())
        switches |= {s for leaves in attach.values() for s in leaves}
        self.adj: dict[str, set[str]] = {s: set() for s in switches}
        for child, up in parent.items():
            if child in switches:
                edges.append((child, up))
        for a, b in edges:
            if a != b:
                self.adj[a].add(b)
                self.adj[b].add(a)
        self.leaves: dict[str, tuple[str, ...]] = {
            name: tuple(sorted(set(leaves))) for name, leaves in attach.items() if leaves}
        for child, up in parent.items():
            if child not in switches:
                self.leaves.setdefault(child, (up,))
        self._dist: dict[str, dict[str, int]] = {}
        self._groups: dict[tuple[tuple[str, ...], int], tuple[str, ...]] = {}
        self._depth: int | None = None

    def local(self, name: str) -> str | None:
        leaves = self.leaves.get(name)
        return None if leaves is None else "+".join(leaves)

    def distances(self, switch: str) -> dict[str, int]:
        """Links from ``switch`` to every reachable switch (BFS, memoised)."""
        hit = self._dist.get(switch)
        if hit is None:
            hit = {switch: 0}
            queue = deque([switch])
            while queue:
                cur = queue.popleft()
                for nxt in self.adj.get(cur, ()):
                    if nxt not in hit:
                        hit[nxt] = hit[cur] + 1
                        queue.append(nxt)
            self._dist[switch] = hit
        return hit

    def groups(self, name: str, level: int) -> tuple[str, ...]:
        leaves = self.leaves.get(name)
        if leaves is None:
            return ("node:" + name,) if level == 0 else (ROOT,)
        if level == 0:
            return ("+".join(leaves),)
        key = (leaves, level)
        hit = self._groups.get(key)
        if hit is None:
            near: set[str] = set()
            for leaf in leaves:
                near.update(s for s, d in self.distances(leaf).items() if d <= level)
            hit = self._groups[key] = tuple(sorted(near))
        return hit

    def link_distance(self, a: str, b: str) -> int | None:
        """Fewest switch links between a leaf of node ``a`` and a leaf of node ``b``."""
        la, lb = self.leaves.get(a), self.leaves.get(b)
        if la is None or lb is None:
            return None
        found = [d for leaf in la for other in lb
                 if (d := self.distances(leaf).get(other)) is not None]
        return min(found, default=None)

    def hops(self, a: str, b: str) -> int | None:
        """Levels between two nodes (0: same local group); None if not connected."""
        if a == b or (self.local(a) is not None and self.local(a) == self.local(b)):
            return 0
        d = self.link_distance(a, b)
        return None if d is None else max(1, (d + 1) // 2)

    @property
    def depth(self) -> int:
        """Levels needed to join any two leaves (ceil of half the leaf diameter)."""
        if self._depth is None:
            leaves = sorted({leaf for ls in self.leaves.values() for leaf in ls})
            far = 0
            for leaf in leaves:
                dist = self.distances(leaf)
                far = max([far, *(dist.get(other, 0) for other in leaves)])
            self._depth = (far + 1) // 2
        return self._depth
