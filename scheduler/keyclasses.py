"""Ready nodes in classes of equal state, each class's lowest node index kept.

A pass at 10,000 nodes has a few dozen such classes (nodes alike in model, free counts
and leaf flags), so the best node for a shape is the best *class*, then its lowest node:
a shape's heap holds one entry per class, ordered by cost alone, and a node's change
costs the shape heaps nothing unless it creates a class (issue 30: one heap entry per
node and shape was ≈ 230,000 pushes in a 5,000-order pass). Classes of equal cost are
told apart by their lowest nodes when a shape asks (``ClusterState._best_class``).

A class is ``(state key, mixed)``: nodes where some tenant's fractional view differs
from the key (``ClusterState.mixed``) are kept apart, so a tenant's fractional shape can
take every other class as it is and look at those nodes one by one.

Each class keeps its members and a lazy min-heap of their indices (the heap's root is
always a member; other entries may be stale). A class gets a new *stamp*, an int never
used before, each time it is created; ``live`` maps the stamps of the classes that have
members to them, and the change log lists the stamps created, from which shape heaps
catch up (ints: a class key is a nested tuple, slow to hash again and again).
"""

from __future__ import annotations

import heapq
from collections.abc import Container, Sequence

from scheduler.nodestate import NodeKey

KeyClass = tuple[NodeKey, bool]  # (state key, mixed)


class KeyClasses:
    def __init__(self, size: int) -> None:
        self.members: dict[KeyClass, dict[int, None]] = {}
        self._low: dict[KeyClass, list[int]] = {}
        self.stamp: dict[KeyClass, int] = {}
        self.live: dict[int, KeyClass] = {}
        self.of: list[KeyClass | None] = [None] * size
        self.changes: list[int] = []
        self._next = 0

    @classmethod
    def built(cls, keys: Sequence[NodeKey], ready: Sequence[bool], mixed: Container[int],
              ) -> KeyClasses:
        """Every ready node in its class at once (members join in index order, so each
        class's index list is sorted: a valid heap as it is)."""
        new = cls(len(keys))
        members, of = new.members, new.of
        for i, key in enumerate(keys):
            if ready[i]:
                kc = (key, i in mixed)
                members.setdefault(kc, {})[i] = None
                of[i] = kc
        for kc, nodes in members.items():
            new._low[kc] = list(nodes)
            new._stamp(kc)
        new.changes = []
        return new

    def copy(self) -> KeyClasses:
        """An independent copy with an empty change log (a pass's own)."""
        new = object.__new__(KeyClasses)
        new.members = {kc: dict(nodes) for kc, nodes in self.members.items()}
        new._low = {kc: list(low) for kc, low in self._low.items()}
        new.stamp, new.live, new.of = dict(self.stamp), dict(self.live), list(self.of)
        new.changes, new._next = [], self._next
        return new

    def _stamp(self, kc: KeyClass) -> None:
        self._next += 1
        self.stamp[kc] = self._next
        self.live[self._next] = kc
        self.changes.append(self._next)

    def lowest(self, kc: KeyClass) -> int:
        """The lowest node index of a (non-empty) class."""
        return self._low[kc][0]

    def join(self, i: int, kc: KeyClass) -> None:
        """Node ``i`` (in no class) joins ``kc``."""
        nodes = self.members.get(kc)
        if nodes is None:
            self.members[kc] = {i: None}
            self._low[kc] = [i]
            self.of[i] = kc
            self._stamp(kc)
            return
        nodes[i] = None
        self.of[i] = kc
        low = self._low[kc]
        heapq.heappush(low, i)
        if len(low) > 4 * len(nodes) + 16:  # stale entries: the sorted members
            low[:] = sorted(nodes)

    def leave(self, i: int) -> None:
        """Node ``i`` leaves its class (no-op when it is in none)."""
        kc = self.of[i]
        if kc is None:
            return
        self.of[i] = None
        nodes = self.members[kc]
        del nodes[i]
        if not nodes:
            del self.members[kc], self._low[kc], self.live[self.stamp.pop(kc)]
            return
        low = self._low[kc]
        while low[0] not in nodes:
            heapq.heappop(low)

    def lowest_outside(self, kc: KeyClass, blocked: Container[int]) -> int | None:
        """The lowest member of ``kc`` not in ``blocked``: a walk down its index heap
        from the root (a child is never smaller than its parent), visiting the blocked
        and stale entries below the answer only."""
        low, nodes = self._low[kc], self.members[kc]
        frontier = [(low[0], 0)]
        size = len(low)
        while frontier:
            i, j = heapq.heappop(frontier)
            if i in nodes and i not in blocked:
                return i
            for child in (2 * j + 1, 2 * j + 2):
                if child < size:
                    heapq.heappush(frontier, (low[child], child))
        return None
