"""The agent API's JSON reader reads with orjson where it can (ADR 0171): whatever the body,
it answers exactly what the standard library's reader (every body's reader before) answers:
the same document, with the same types, or the same error at the same field."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from portal.fleet import jsonbody

MAX = 1 << 20


def _verdict(read: Any, raw: bytes) -> tuple[str, str]:
    try:
        return "ok", _typed(read(raw))
    except jsonbody.BodyError as exc:
        return "error", f"{exc.field}: {exc.problem}"


def _typed(doc: Any) -> str:
    """A document with every scalar's type spelled out (1 and 1.0 differ)."""
    if isinstance(doc, dict):
        return "{" + ",".join(f"{k!r}:{_typed(v)}" for k, v in doc.items()) + "}"
    if isinstance(doc, list):
        return "[" + ",".join(_typed(v) for v in doc) + "]"
    return f"{type(doc).__name__}:{doc!r}"


def _same(raw: bytes) -> None:
    fast = _verdict(lambda r: jsonbody.parse_json(r, max_bytes=MAX), raw)
    slow = _verdict(lambda r: jsonbody._parse_stdlib(r, jsonbody.MAX_DEPTH), raw)
    assert fast == slow, raw[:200]


SCALARS = (st.none() | st.booleans() | st.text()
           | st.integers(min_value=-(2**70), max_value=2**70)
           | st.floats(allow_nan=True, allow_infinity=True))
DOCS = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=30)


@settings(max_examples=400, deadline=None)
@given(DOCS)
def test_orjson_reader_answers_as_the_standard_library_on_any_document(doc: Any) -> None:
    _same(json.dumps(doc).encode())  # NaN, Infinity, big integers, NUL, lone surrogates
    _same(json.dumps(doc, ensure_ascii=False).encode("utf-8", "surrogatepass"))


@pytest.mark.parametrize("raw", [
    b"", b" ", b"null", b"1e400", b"-1e400", b"1.7976931348623157e309", b"NaN",
    b"[Infinity]", b"18446744073709551615", b"18446744073709551616",
    b'{"seq": 123456789012345678901234567890}', b"-9223372036854775809",
    b'"\\u0000"', b'{"a\\u0000": 1}', b'"\\ud800"', b'"\\udc00x"', b'"\\ud83d\\ude00"',
    b'"a\xff"', b'"\x00"', b'"\x1f"', b"\xef\xbb\xbf{}", b'{"a": 1, "a": 2}',
    b"[" * 33 + b"]" * 33, b"[" * 32 + b"]" * 32, b"[" * 2000 + b"]" * 2000, b"{", b"[1,]",
    b'{"node_id": "n", "telemetry": [{"ts": 1764640000.123456, "gpus": [{"index": 0}]}]}',
    b"-0", b"-0.0", b"1E5", b"0.1", b"1" * 18, b'"' + b"1" * 19 + b'"',
])
def test_orjson_reader_answers_as_the_standard_library_on_edge_cases(raw: bytes) -> None:
    _same(raw)


def test_a_report_is_read_by_orjson(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast reader is used for a plain report (else this change would save nothing)."""
    from agents.sim.node import SimNode, telemetry_template

    node = SimNode.build(1, "h-1", "tok", None, telemetry_template(), "bench")
    node.node_id = "n-1"
    raw = json.dumps(node.report(1764640000.0)).encode()

    def refuse(*_: Any) -> Any:
        raise AssertionError("read by the standard library")

    monkeypatch.setattr(jsonbody, "_parse_stdlib", refuse)
    assert jsonbody.parse_json(raw, max_bytes=MAX)["node_id"] == "n-1"


def test_nesting_limit_is_32_levels() -> None:
    assert jsonbody.parse_json(b"[" * 32 + b"]" * 32, max_bytes=MAX) is not None
    with pytest.raises(jsonbody.BodyError, match="nested deeper than 32 levels"):
        jsonbody.parse_json(b"[" * 33 + b"]" * 33, max_bytes=MAX)
    with pytest.raises(jsonbody.BodyError, match="nested deeper than 32 levels"):
        jsonbody.parse_json(b'{"a": ' * 33 + b"1" + b"}" * 33, max_bytes=MAX)
