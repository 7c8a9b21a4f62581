"""``core.jsontext.dumps``: the same JSON values as ``json.dumps``, faster, never failing
where it did not fail before."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from portal.core import jsontext

_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False,
                                                                  allow_infinity=False) \
    | st.text()
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=5)
                       | st.dictionaries(st.text(max_size=8), inner, max_size=5), max_leaves=30)


@given(_values)
def test_decodes_to_what_json_dumps_decodes_to(value: Any) -> None:
    try:
        expected = json.loads(json.dumps(value))
    except ValueError:  # lone surrogates: json writes \ud800 escapes jsonb would refuse
        return
    assert json.loads(jsontext.dumps(value)) == expected


@pytest.mark.parametrize("value", [2**64, -(2**63) - 1, {"counter": 10**30}])
def test_an_integer_beyond_64_bits_falls_back_to_the_standard_library(value: Any) -> None:
    assert json.loads(jsontext.dumps(value)) == value


def test_non_string_keys_are_written_as_json_does() -> None:
    assert json.loads(jsontext.dumps({1: "a", 2.5: "b"})) == json.loads(json.dumps(
        {1: "a", 2.5: "b"}))


def test_non_ascii_is_written_as_utf8_not_escapes() -> None:
    assert jsontext.dumps({"name": "NVIDIA H100 显卡"}) == '{"name":"NVIDIA H100 显卡"}'
