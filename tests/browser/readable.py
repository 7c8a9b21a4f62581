"""In-page checks of the fabric map's readability, shared by the fabric-map test and the
journey (issue 13): every label's rendered size and whether it fits its box."""

from __future__ import annotations

from typing import Any

MEASURE_JS = """() => {
  const svg = document.querySelector('#fabric-map');
  if (!svg) return null;
  const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
  return [...svg.querySelectorAll('text')].map(t => {
    const rect = t.parentNode.querySelector('rect');
    const tb = t.getBBox(), rb = rect.getBBox();
    return {text: t.textContent, px: parseFloat(getComputedStyle(t).fontSize) * scale,
            fits: tb.x >= rb.x - 0.5 && tb.x + tb.width <= rb.x + rb.width + 0.5
                  && tb.y >= rb.y - 0.5 && tb.y + tb.height <= rb.y + rb.height + 0.5};
  });
}"""


def fabric_labels(page: Any) -> list[dict[str, Any]]:
    labels = page.evaluate(MEASURE_JS)
    assert labels, "no fabric map on the page"
    return labels  # type: ignore[no-any-return]


def unreadable(page: Any) -> list[str]:
    """Labels under 11 px as drawn, or wider or taller than their box."""
    return [f"{x['text']} ({x['px']:.1f}px, fits={x['fits']})" for x in fabric_labels(page)
            if x["px"] < 11 or not x["fits"]]
