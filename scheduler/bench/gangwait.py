"""Why a gang waits: a per-moment classification for the fabric benchmark.

At every event of the timeline, each waiting gang (``need`` nodes of ``gpus`` GPUs,
``leaf`` = it requires one leaf) is put in one bucket, weighted by the time until the
next event. The counterfactual ``free`` of a node is: idle now, or every job on it
arrived *after* the gang (those jobs passed it while it waited):

- ``overtaken``: with the counterfactual nodes it would fit (in one leaf if it requires
  one) — later jobs took what it needed (starvation by backfill);
- ``capacity``: even counting later jobs' GPUs as free, fewer free GPUs than it asks
  (the fabric is full: queueing, no placement can help);
- ``leaf_frag``: enough counterfactually free whole nodes in total, but no leaf holds
  ``need`` of them (fragmentation across leaves);
- ``node_frag``: enough free GPUs, but not as whole idle nodes (fragmentation inside
  nodes: small jobs spread over many nodes).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

BUCKETS = ("capacity", "overtaken", "leaf_frag", "node_frag")
NEVER = 1 << 60  # rank of an idle node's earliest occupant (none)


@dataclass
class WaitCauses:
    """Gang wait-seconds per bucket, and per gang (to look at the tail)."""

    total: dict[str, float] = field(default_factory=lambda: dict.fromkeys(BUCKETS, 0.0))
    per_gang: dict[str, dict[str, float]] = field(default_factory=dict)

    def add(self, gang: str, bucket: str, seconds: float) -> None:
        self.total[bucket] += seconds
        mine = self.per_gang.setdefault(gang, dict.fromkeys(BUCKETS, 0.0))
        mine[bucket] += seconds

    def shares(self, gangs: Sequence[str] | None = None) -> dict[str, float]:
        """Share (%) of wait-seconds per bucket, over all gangs or over ``gangs``."""
        if gangs is None:
            sums = self.total
        else:
            sums = dict.fromkeys(BUCKETS, 0.0)
            for g in gangs:
                for b, v in self.per_gang.get(g, {}).items():
                    sums[b] += v
        whole = sum(sums.values())
        return {b: round(100 * v / whole, 1) if whole else 0.0 for b, v in sums.items()}

    def points_by(self, bucket: str, group_of: Mapping[str, int]) -> dict[int, float]:
        """Where one bucket's share comes from: per group (``group_of``: gang -> group,
        e.g. its node count), the group's wait-seconds in ``bucket`` as points of *all*
        gangs' wait-seconds, so the groups' points add up to ``shares()[bucket]``
        (up to rounding). Groups without such seconds are left out; ascending."""
        whole = sum(self.total.values())
        points: dict[int, float] = {}
        for gang, buckets in self.per_gang.items():
            seconds = buckets.get(bucket, 0.0)
            group = group_of.get(gang)
            if seconds and group is not None:
                points[group] = points.get(group, 0.0) + seconds
        return {g: round(100 * v / whole, 1) for g, v in sorted(points.items()) if whole}


@dataclass(frozen=True)
class Moment:
    """What the classifier needs of one instant of the fabric.

    ``first`` per node: the arrival rank of its earliest running job (``NEVER`` when
    idle); ``leaf_first``: per leaf, the sorted ``first`` of its nodes; ``later_gpus``:
    sorted (rank, GPUs) of running jobs, with a suffix sum, to count GPUs held by jobs
    that arrived after a rank."""

    leaf_first: Mapping[str, Sequence[int]]
    all_first: Sequence[int]  # sorted
    free_gpus: float
    ranks: Sequence[int]  # running jobs' ranks, sorted
    suffix_gpus: Sequence[float]  # suffix_gpus[k] = GPUs of running jobs ranks[k:]

    @staticmethod
    def build(first: Mapping[str, int], leaf_of: Mapping[str, str], free_gpus: float,
              running: Sequence[tuple[int, float]]) -> Moment:
        by_leaf: dict[str, list[int]] = {}
        for node, rank in first.items():
            leaf = leaf_of.get(node)
            if leaf is not None:
                by_leaf.setdefault(leaf, []).append(rank)
        for ranks in by_leaf.values():
            ranks.sort()
        jobs = sorted(running)
        suffix = [0.0] * (len(jobs) + 1)
        for k in range(len(jobs) - 1, -1, -1):
            suffix[k] = suffix[k + 1] + jobs[k][1]
        return Moment(by_leaf, sorted(first.values()), free_gpus,
                      [r for r, _ in jobs], suffix)

    def later_free(self, sorted_first: Sequence[int], rank: int) -> int:
        """Nodes whose earliest occupant arrived after ``rank`` (or none: idle)."""
        return len(sorted_first) - bisect_right(sorted_first, rank)

    def classify(self, rank: int, need: int, gpus: int, leaf: bool) -> str:
        if leaf:
            fits = any(self.later_free(f, rank) >= need for f in self.leaf_first.values())
        else:
            fits = self.later_free(self.all_first, rank) >= need
        if fits:
            return "overtaken"
        later = self.suffix_gpus[bisect_right(self.ranks, rank)]
        if self.free_gpus + later < need * gpus:
            return "capacity"
        if self.later_free(self.all_first, rank) >= need:
            return "leaf_frag"
        return "node_frag"
