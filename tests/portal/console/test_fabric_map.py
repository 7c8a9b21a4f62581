"""Issue 13: "a readable fabric map (leaf columns, full names, ≥ 11 px labels, no crossing
lines for a 2-tier tree; usable at 64 leaves)".

Old code (selectors.fabric_map + templates/console/fabric.html): spines, leaves and nodes in
three rows, every spine-leaf cable drawn (a 2-tier mesh crosses itself), leaf names cut to
14 characters, hostnames to their last 4, 9-10 px text in an SVG scaled to the page width
(a 64-leaf map at 1280 px shrank its labels to about 1 px). The geometry is now
portal/console/fabricmap.py; tests/browser/test_fabric_map.py measures it in Chromium.
"""

from __future__ import annotations

from itertools import combinations

import pytest

from portal.console import fabricmap
from portal.console.fabricmap import NodeIn, SwitchIn

Segment = tuple[int, int, int, int]


def tree(leaves: int, nodes_per_leaf: int, spines: int, long: bool = False) -> fabricmap.Layout:
    name = "leaf-switch-row{:02d}-rack{:02d}-mellanox-qm9700" if long else "leaf-{:02d}"
    up = [SwitchIn(f"s{i}", f"spine-{i:02d}", leaves) for i in range(spines)]
    lv = [SwitchIn(f"l{i}", name.format(i, i * 2), spines) for i in range(leaves)]
    nodes = [NodeIn(f"gpu-node-{i * nodes_per_leaf + j:04d}.cluster.example.org", f"l{i}",
                    "ready", "#2e7d32", 4, 8)
             for i in range(leaves) for j in range(nodes_per_leaf)]
    return fabricmap.layout(up, lv, nodes)


def _orient(ax: int, ay: int, bx: int, by: int, cx: int, cy: int) -> int:
    v = (bx - ax) * (cy - ay) - (by - ay) * (cx - ax)
    return (v > 0) - (v < 0)


def _overlap(s: Segment, t: Segment) -> bool:
    """Collinear segments sharing more than a point (one line drawn over another)."""
    if _orient(*s, *t[:2]) or _orient(*s, *t[2:]):
        return False
    axis = 0 if s[0] != s[2] else 1
    lo = max(min(s[axis], s[axis + 2]), min(t[axis], t[axis + 2]))
    hi = min(max(s[axis], s[axis + 2]), max(t[axis], t[axis + 2]))
    return hi > lo


def crossings(lines: list[Segment]) -> list[tuple[Segment, Segment]]:
    """Pairs of segments that cross (or lie over each other). A line ending on another
    (a T-joint: the bus, a trunk) joins it and is not a crossing."""
    bad = []
    for s, t in combinations(lines, 2):
        o1, o2 = _orient(*s, *t[:2]), _orient(*s, *t[2:])
        o3, o4 = _orient(*t, *s[:2]), _orient(*t, *s[2:])
        if (o1 * o2 < 0 and o3 * o4 < 0) or _overlap(s, t):
            bad.append((s, t))
    return bad


@pytest.mark.parametrize(("leaves", "per_leaf", "spines"), [(4, 8, 2), (64, 4, 8)],
                         ids=["2-tier", "64-leaves"])
def test_fabric_map_has_no_crossing_lines(leaves: int, per_leaf: int, spines: int) -> None:
    out = tree(leaves, per_leaf, spines)
    assert len(out.leaves) == leaves and len(out.nodes) == leaves * per_leaf
    assert crossings(out.links) == []


def test_fabric_map_crossing_check_sees_a_mesh() -> None:
    """The check itself: the old drawing (every spine to every leaf) crosses."""
    mesh = [(100, 40, 50, 150), (200, 40, 250, 150), (100, 40, 250, 150), (200, 40, 50, 150)]
    assert crossings(mesh) != []


def test_fabric_map_shows_full_names_in_leaf_columns() -> None:
    out = tree(3, 2, 2, long=True)
    names = [s["name"] for s in out.leaves]
    assert names[0] == "leaf-switch-row00-rack00-mellanox-qm9700"
    assert "gpu-node-0005.cluster.example.org 4/8" in [n["name"] for n in out.nodes]
    for box in out.upper + out.leaves + out.nodes:
        assert fabricmap.text_px(box["name"]) + 2 * fabricmap.PAD <= box["w"], box["name"]
    for leaf in out.leaves:  # each node sits in its leaf's column
        mine = [n for n in out.nodes if leaf["x"] <= n["x"] < leaf["x"] + leaf["w"]]
        assert len(mine) == 2


def test_fabric_map_labels_are_at_least_11px() -> None:
    assert fabricmap.FONT_PX >= 11


def test_fabric_map_columns_do_not_overlap_at_64_leaves() -> None:
    out = tree(64, 4, 8, long=True)
    boxes = sorted((s["x"], s["x"] + s["w"]) for s in out.leaves)
    assert all(a[1] < b[0] for a, b in zip(boxes, boxes[1:], strict=False))
    spines = sorted((s["x"], s["x"] + s["w"]) for s in out.upper)
    assert all(a[1] < b[0] for a, b in zip(spines, spines[1:], strict=False))
    assert out.width >= boxes[-1][1]


def test_fabric_map_nodes_without_a_leaf_get_their_own_column() -> None:
    out = fabricmap.layout([], [SwitchIn(1, "leaf-a")],
                           [NodeIn("n1", 1, "ready", "#000", 0, 8),
                            NodeIn("n2", None, "down", "#000", 0, 8)], no_leaf="No leaf")
    assert [s["name"] for s in out.leaves] == ["leaf-a", "No leaf"]


