"""Property tests: no wrong rate ever comes out of a saturated/reset counter; ttar
round-trips any text."""

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from agents.sysfs import ttar
from agents.sysfs.infiniband import FIXED_WIDTHS, counter_max
from agents.sysfs.rates import counter_rate

NAMES = [*FIXED_WIDTHS, "port_xmit_data", "port_rcv_packets"]


@settings(deadline=None)
@given(st.sampled_from(NAMES), st.booleans(), st.integers(0, 2**64 - 1),
       st.integers(0, 2**64 - 1), st.floats(0.001, 1e6))
def test_rate_is_never_wrong(name: str, ext: bool, a: int, b: int, dt: float) -> None:
    limit = counter_max(name, ext)
    prev, cur = min(a, limit), min(b, limit)
    rate, why = counter_rate(name, prev, cur, dt, ext)
    if cur >= limit:
        assert (rate, why) == (None, "saturated")
    elif prev >= limit or cur < prev:
        assert (rate, why) == (None, "reset")
    else:
        assert rate is not None
        assert rate >= 0
        scale = 4 if name.endswith("_data") else 1
        assert abs(rate * dt - (cur - prev) * scale) <= 1e-6 * max(1, (cur - prev) * scale)


@settings(max_examples=40, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                      blacklist_characters="\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"),
               max_size=200))
def test_ttar_roundtrip(content: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "src"
        (src / "a").mkdir(parents=True)
        (src / "a" / "f").write_text(content)
        out = Path(d) / "out"
        ttar.extract(ttar.archive(src), out)
        assert (out / "a" / "f").read_text() == content
