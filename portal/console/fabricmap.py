"""The fabric map's layout (issue 13: "a readable fabric map — leaf columns, full names,
≥ 11 px labels, no crossing lines for a 2-tier tree; usable at 64 leaves").

Pure geometry, no ORM: switches and nodes in, boxes, labels and lines out.

- One column per leaf switch, its nodes stacked under it; a column is as wide as its
  longest label needs (monospace, so the width is known here), so no name is cut.
- The upper tier (spines, cores) sits in one row above a horizontal bus; each spine and
  each leaf joins the bus with one vertical line. A full spine-leaf mesh drawn cable by
  cable crosses itself everywhere; the bus says the same (every leaf reaches every spine)
  without a crossing. The cable count per switch is in its tooltip.
- A leaf's nodes hang off one vertical trunk at the column's left edge by short stubs.
- The SVG is drawn at its natural size (1 user unit = 1 CSS px) inside a scrolling box:
  scaling a 64-leaf map down to the page width is what made the labels unreadable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

FONT_PX = 12
CHAR_PX = 7.3  # advance of one character of a 12 px monospace font (≈ 0.6 em)
PAD = 10
GAP = 14
MIN_COL = 150
BOX_H = 26
ROW_H = 32
TRUNK = 10  # the trunk's distance from the column's left edge
STUB = 10  # from the trunk to a node box
UPPER_Y = 12
BUS_Y = UPPER_Y + BOX_H + 22
LEAF_Y = BUS_Y + 22
FIRST_NODE_Y = LEAF_Y + BOX_H + 16


@dataclass(frozen=True)
class SwitchIn:
    key: Any
    name: str
    links: int = 0


@dataclass(frozen=True)
class NodeIn:
    hostname: str
    leaf: Any
    state: str
    colour: str
    allocated: int
    gpus: int


@dataclass
class Layout:
    width: int
    height: int
    upper: list[dict[str, Any]] = field(default_factory=list)
    leaves: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    links: list[tuple[int, int, int, int]] = field(default_factory=list)
    font_px: int = FONT_PX


def text_px(text: str) -> int:
    return math.ceil(len(text) * CHAR_PX)


def node_label(node: NodeIn) -> str:
    return f"{node.hostname} {node.allocated}/{node.gpus}"


def _box(name: str, x: int, y: int, width: int, **extra: Any) -> dict[str, Any]:
    return {"name": name, "x": x, "y": y, "w": width, "h": BOX_H, "cx": x + width // 2,
            "ty": y + BOX_H // 2 + FONT_PX * 35 // 100, **extra}


def _columns(leaves: Sequence[SwitchIn], by_leaf: dict[Any, list[NodeIn]]
             ) -> list[tuple[SwitchIn, int, int]]:
    """(leaf, left x, width) for each column, left to right."""
    out, x = [], GAP
    for leaf in leaves:
        labels = [leaf.name] + [node_label(n) for n in by_leaf.get(leaf.key, [])]
        need = max(text_px(t) for t in labels) + 2 * PAD + TRUNK + STUB
        width = max(MIN_COL, need)
        out.append((leaf, x, width))
        x += width + GAP
    return out


def layout(upper: Sequence[SwitchIn], leaves: Sequence[SwitchIn],
           nodes: Sequence[NodeIn], *, no_leaf: str = "—") -> Layout:
    by_leaf: dict[Any, list[NodeIn]] = {}
    known = {leaf.key for leaf in leaves}
    for node in nodes:
        by_leaf.setdefault(node.leaf if node.leaf in known else None, []).append(node)
    columns = list(leaves) + ([SwitchIn(None, no_leaf)] if None in by_leaf else [])
    cols = _columns(columns, by_leaf)
    widths = [max(MIN_COL // 2, text_px(s.name) + 2 * PAD) for s in upper]
    leaves_w = cols[-1][1] + cols[-1][2] + GAP if cols else 0
    width = max(leaves_w, sum(widths) + GAP * (len(widths) + 1), 400)
    deepest = max((len(v) for v in by_leaf.values()), default=0)
    out = Layout(width=width, height=FIRST_NODE_Y + deepest * ROW_H + GAP)
    _place_upper(out, upper, widths)
    for leaf, left, col_w in cols:
        _place_column(out, leaf, left, col_w, by_leaf.get(leaf.key, []),
                      on_bus=bool(upper) and leaf.key is not None)
    if upper and out.leaves:
        xs = [s["cx"] for s in out.upper] + [s["cx"] for s in out.leaves if s["on_bus"]]
        out.links.append((min(xs), BUS_Y, max(xs), BUS_Y))
    return out


def _place_upper(out: Layout, upper: Sequence[SwitchIn], widths: list[int]) -> None:
    spare = out.width - sum(widths)
    step = spare / (len(widths) + 1) if widths else 0
    x = step
    for sw, w in zip(upper, widths, strict=True):
        box = _box(sw.name, int(x), UPPER_Y, w, links=sw.links)
        out.upper.append(box)
        out.links.append((box["cx"], UPPER_Y + BOX_H, box["cx"], BUS_Y))
        x += w + step


def _place_column(out: Layout, leaf: SwitchIn, left: int, col_w: int,
                  nodes: list[NodeIn], *, on_bus: bool) -> None:
    box = _box(leaf.name, left, LEAF_Y, col_w, links=leaf.links, on_bus=on_bus,
               nodes=len(nodes))
    out.leaves.append(box)
    if on_bus:
        out.links.append((box["cx"], BUS_Y, box["cx"], LEAF_Y))
    if not nodes:
        return
    trunk_x = left + TRUNK
    node_x = trunk_x + STUB
    last_mid = FIRST_NODE_Y + (len(nodes) - 1) * ROW_H + BOX_H // 2
    out.links.append((trunk_x, LEAF_Y + BOX_H, trunk_x, last_mid))
    for i, node in enumerate(nodes):
        y = FIRST_NODE_Y + i * ROW_H
        out.links.append((trunk_x, y + BOX_H // 2, node_x, y + BOX_H // 2))
        out.nodes.append({**_box(node_label(node), node_x, y, left + col_w - node_x),
                          "hostname": node.hostname, "state": node.state,
                          "colour": node.colour, "allocated": node.allocated,
                          "gpus": node.gpus, "busy": bool(node.allocated),
                          "tx": node_x + PAD})
