"""Choosing the nodes of a multi-node gang under the switch tree.

Hops between nodes are counted in switch levels up to their lowest common ancestor:
0 = same leaf, 1 = same spine (one level above the leaf), and so on. A gang goes under
one leaf when one leaf can hold it (the fullest such leaf: best fit), otherwise under the
lowest common switch that can, spanning as few leaves as possible.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scheduler.cluster import Choice
from scheduler.model import Locality, LocalityLevel, Topology

UNBOUNDED = 1_000

# Node index -> switches from its leaf up.
Ancestors = Mapping[int, tuple[str, ...]] | Sequence[tuple[str, ...]]


def max_hops(locality: Locality | None) -> tuple[int, bool]:
    """(allowed hop level, whether it is required) for a gang's locality."""
    if locality is None:
        return 0, False
    if locality.level in (LocalityLevel.NVLINK, LocalityLevel.NODE, LocalityLevel.LEAF):
        return 0, locality.required
    hops = locality.max_hops if locality.max_hops is not None else UNBOUNDED
    return hops, locality.required


def group_key(ancestors: tuple[str, ...], level: int, node_name: str) -> str:
    """The switch at ``level`` above a node; the cluster root beyond the tree's top."""
    if level < len(ancestors):
        return ancestors[level]
    if not ancestors:
        return "node:" + node_name if level == 0 else "<root>"
    return "<root>"


def select_gang(
    choices: Sequence[Choice], count: int, names: Sequence[str], topology: Topology,
    locality: Locality | None, node_ancestors: Ancestors | None = None,
) -> tuple[list[Choice], int] | None:
    """``count`` nodes from ``choices`` and the hop level they span, or None.

    ``node_ancestors[i]`` may give node ``i``'s switches precomputed (else they are
    looked up in ``topology``)."""
    if len(choices) < count:
        return None
    ancestors: Ancestors = node_ancestors if node_ancestors is not None else {
        c.node: topology.ancestors(names[c.node]) for c in choices}
    depth = max((len(ancestors[c.node]) for c in choices), default=0)
    limit, required = max_hops(locality)
    top = depth if not required else min(limit, depth)
    for level in range(top + 1):
        picked = _best_group(choices, count, names, ancestors, level)
        if picked is not None:
            return picked, level
    if required:
        return None
    return _spread(choices, count, names, ancestors), depth


def _best_group(
    choices: Sequence[Choice], count: int, names: Sequence[str],
    ancestors: Ancestors, level: int,
) -> list[Choice] | None:
    groups: dict[str, list[Choice]] = {}
    for c in choices:
        groups.setdefault(group_key(ancestors[c.node], level, names[c.node]), []).append(c)
    fitting = [g for g in groups.values() if len(g) >= count]
    if not fitting:
        return None
    best = min(fitting, key=lambda g: (len(g), min(c.node for c in g)))
    return _fewest_leaves(best, count, names, ancestors)


def _fewest_leaves(
    group: Sequence[Choice], count: int, names: Sequence[str],
    ancestors: Ancestors,
) -> list[Choice]:
    """Take whole leaves first (largest first), best-cost nodes within a leaf."""
    leaves: dict[str, list[Choice]] = {}
    for c in group:
        leaves.setdefault(group_key(ancestors[c.node], 0, names[c.node]), []).append(c)
    ordered = sorted(leaves.values(), key=lambda g: (-len(g), min(c.node for c in g)))
    out: list[Choice] = []
    for leaf in ordered:
        for c in sorted(leaf, key=lambda c: (c.cost, c.node)):
            if len(out) == count:
                return out
            out.append(c)
    return out


def _spread(
    choices: Sequence[Choice], count: int, names: Sequence[str],
    ancestors: Ancestors,
) -> list[Choice]:
    return _fewest_leaves(choices, count, names, ancestors)
