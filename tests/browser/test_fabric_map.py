"""Issue 13: the console's fabric map read in a real Chromium, on a 2-tier tree and on 64
leaves: every label is drawn at ≥ 11 px, fits its box and is the switch's or node's full
name. Old code: 9-10 px text in an SVG scaled to the page width (at 64 leaves ≈ 1 px) and
names cut by ``truncatechars:14`` / ``slice:"-4:"``."""

from __future__ import annotations

from typing import Any

import pytest
from django.template.loader import render_to_string

from portal.console import fabricmap
from tests.browser.readable import fabric_labels, unreadable
from tests.portal.console.test_fabric_map import tree

pytestmark = pytest.mark.browser


def _show(page: Any, out: fabricmap.Layout) -> None:
    svg = render_to_string("console/_fabric_svg.html", {"map": out})
    page.set_content(f"<!doctype html><html><body style='margin:0'><main>{svg}</main>"
                     "</body></html>")


@pytest.mark.parametrize(("leaves", "per_leaf", "spines"), [(4, 8, 2), (64, 4, 8)],
                         ids=["2-tier", "64-leaves"])
def test_fabric_map_labels_readable_in_chromium(page: Any, leaves: int, per_leaf: int,
                                                spines: int) -> None:
    out = tree(leaves, per_leaf, spines, long=True)
    _show(page, out)
    assert unreadable(page) == []
    shown = {x["text"] for x in fabric_labels(page)}
    assert {s["name"] for s in out.leaves + out.upper + out.nodes} <= shown
    assert "leaf-switch-row63-rack126-mellanox-qm9700" in shown or leaves < 64
    # usable: the page scrolls to the last column instead of shrinking it
    page.locator(".fabric-scroll").evaluate("el => el.scrollLeft = el.scrollWidth")
    last = page.locator("#fabric-map g.leaf").last
    assert last.is_visible()
