"""Choosing the nodes of a multi-node gang under the switch tree.

Hops between nodes are counted in switch levels (``Topology.hops``): 0 = same leaf (or
rail group), 1 = through one spine, and so on; on a switch graph a *group at level L* is
every node within L links of one switch (``scheduler.switchgraph``). A gang goes under
one leaf when one leaf can hold it (the fullest such leaf: best fit), otherwise under the
lowest common switch that can, spanning as few leaves as possible.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.cluster import Choice
from scheduler.groups import NodeGroups
from scheduler.model import Locality, LocalityLevel, Topology

UNBOUNDED = 1_000


def max_hops(locality: Locality | None) -> tuple[int, bool]:
    """(allowed hop level, whether it is required) for a gang's locality."""
    if locality is None:
        return 0, False
    if locality.level in (LocalityLevel.NVLINK, LocalityLevel.NODE, LocalityLevel.LEAF):
        return 0, locality.required
    hops = locality.max_hops if locality.max_hops is not None else UNBOUNDED
    return hops, locality.required


def select_gang(
    choices: Sequence[Choice], count: int, names: Sequence[str], topology: Topology,
    locality: Locality | None, node_groups: NodeGroups | None = None,
    spread: bool = False,
) -> tuple[list[Choice], int] | None:
    """``count`` nodes from ``choices`` and the hop level they span, or None.

    ``node_groups`` may give the nodes' switch groups precomputed (else they are looked
    up in ``topology``). ``spread`` (fabric policies): a gang that spans leaves takes the
    leaves with the fewest candidate nodes first, keeping the emptiest leaves for the
    gangs that need one leaf (else the fullest first: fewest leaves spanned)."""
    if len(choices) < count:
        return None
    groups = node_groups if node_groups is not None else NodeGroups(names, topology)
    depth = max((groups.levels(c.node) for c in choices), default=0)
    limit, required = max_hops(locality)
    top = depth if not required else min(limit, depth)
    for level in range(top + 1):
        picked = _best_group(choices, count, groups, level, spread and level > 0)
        if picked is not None:
            return picked, level
    if required:
        return None
    return _fewest_leaves(choices, count, groups, spread), depth


def _best_group(
    choices: Sequence[Choice], count: int, groups: NodeGroups, level: int,
    spread: bool = False,
) -> list[Choice] | None:
    """The smallest group of ``level`` that holds the gang (best fit), lowest node first."""
    by_group: dict[str, list[Choice]] = {}
    for c in choices:
        for key in groups.at(c.node, level):
            by_group.setdefault(key, []).append(c)
    fitting = [g for g in by_group.values() if len(g) >= count]
    if not fitting:
        return None
    best = min(fitting, key=lambda g: (len(g), min(c.node for c in g)))
    return _fewest_leaves(best, count, groups, spread)


def _fewest_leaves(
    group: Sequence[Choice], count: int, groups: NodeGroups, spread: bool = False,
) -> list[Choice]:
    """Take whole leaves first (largest first; with ``spread`` smallest first), best-cost
    nodes within a leaf."""
    leaves: dict[str, list[Choice]] = {}
    for c in group:
        leaves.setdefault(groups.at(c.node, 0)[0], []).append(c)
    sign = 1 if spread else -1
    ordered = sorted(leaves.values(), key=lambda g: (sign * len(g), min(c.node for c in g)))
    out: list[Choice] = []
    for leaf in ordered:
        for c in sorted(leaf, key=lambda c: (c.cost, c.node)):
            if len(out) == count:
                return out
            out.append(c)
    return out
