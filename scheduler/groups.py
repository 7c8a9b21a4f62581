"""Switch groups of a working state's nodes per level, memoised (see ``Topology.groups``)."""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.model import Topology


class NodeGroups:
    """Switch groups per (node index, level), memoised; see ``Topology.groups``."""

    def __init__(self, names: Sequence[str], topology: Topology) -> None:
        self.names, self.topology = names, topology
        self._at: dict[tuple[int, int], tuple[str, ...]] = {}
        self._levels: dict[int, int] = {}

    def at(self, i: int, level: int) -> tuple[str, ...]:
        hit = self._at.get((i, level))
        if hit is None:
            hit = self._at[(i, level)] = self.topology.groups(self.names[i], level)
        return hit

    def levels(self, i: int) -> int:
        hit = self._levels.get(i)
        if hit is None:
            hit = self._levels[i] = self.topology.levels(self.names[i])
        return hit
