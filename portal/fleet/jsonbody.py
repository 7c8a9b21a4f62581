"""The one JSON reader of the agent API: it caps the body size and the nesting depth
(the C parser's recursion on deep input raises ``RecursionError``), and refuses NaN and
±Infinity (also overflowing literals such as ``1e400``), NUL characters and lone
surrogates anywhere in the document — unknown fields included, since they are stored in
``jsonb`` columns, which refuse them too. Bodies are UTF-8 (§1).

A body is read by orjson first (it decodes a node report in about a third of the time of
``json.loads``, which calls back into Python for every float). orjson differs from the
standard library in three ways, and each sends the body to the standard library's reader,
whose verdict (the document, or the error) is then the answer, exactly as before:

- it refuses some text the standard library reads (``NaN``, ``Infinity``, ``1e400``, an
  empty body, a BOM, nesting past 1,024): the standard library's reader decides;
- it reads an integer beyond 64 bits as a float: a body with a run of 19 or more digits
  anywhere (quoted or not; ``jsontext.might_hold_big_int``) is read by the standard
  library;
- it accepts ``\\u0000``: a body with a NUL or surrogate escape is read by the
  standard library, as is every body where one may hide (``_SUSPECT_ESCAPE``).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import orjson

from portal.core import jsontext

MAX_DEPTH = 32


class BodyError(ValueError):
    """The body is not an acceptable JSON document; ``field`` says where (or ``$``)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field, self.problem = field, problem


# Escapes that decode to a NUL or to a (maybe lone) surrogate: only when the text has one,
# or a number decoded to NaN/±Infinity, is every value of the document checked.
_SUSPECT_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")  # NUL, high or low surrogate
_SUSPECT_ESCAPE_BYTES = re.compile(_SUSPECT_ESCAPE.pattern.encode())


def _stdlib_only(raw: bytes) -> bool:
    """orjson might read ``raw`` differently from the standard library (module docstring)."""
    return _SUSPECT_ESCAPE_BYTES.search(raw) is not None or jsontext.might_hold_big_int(raw)


def parse_json(raw: bytes, *, max_bytes: int, max_depth: int = MAX_DEPTH) -> Any:
    """Parse an agent API body (UTF-8, §1): ``BodyError`` for anything a later step would
    choke on."""
    if len(raw) > max_bytes:
        raise BodyError("$", f"body larger than {max_bytes} bytes")
    if not _stdlib_only(raw):
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass  # the standard library's reader decides (module docstring)
        else:
            if not _depth_ok(doc, max_depth):
                raise BodyError(*_first_bad(doc, max_depth))
            return doc
    return _parse_stdlib(raw, max_depth)


def _parse_stdlib(raw: bytes, max_depth: int) -> Any:
    """``parse_json`` by the standard library's reader (every body did so before orjson)."""
    non_finite: list[float] = []

    def number(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            non_finite.append(value)
        return value

    try:
        text = raw.decode("utf-8")
        doc = json.loads(text or "null", parse_float=number, parse_constant=number)
    except RecursionError:
        raise BodyError("$", f"nested deeper than {max_depth} levels") from None
    except ValueError:  # includes UnicodeDecodeError and oversized integer literals
        raise BodyError("$", "not valid UTF-8 JSON") from None
    suspect = bool(non_finite) or _SUSPECT_ESCAPE.search(text) is not None
    if not _depth_ok(doc, max_depth) or (suspect and not _document_ok(doc, max_depth)):
        raise BodyError(*_first_bad(doc, max_depth))
    return doc


def _depth_ok(doc: Any, max_depth: int) -> bool:
    """No object or array nested deeper than ``max_depth`` (a walk over containers; the
    recursion is bounded by ``max_depth``)."""
    kind = type(doc)
    if kind is not dict and kind is not list:
        return True
    if max_depth <= 0:
        return False
    for value in doc.values() if kind is dict else doc:
        inner = type(value)
        if (inner is dict or inner is list) and not _depth_ok(value, max_depth - 1):
            return False
    return True


def _bad_str(value: str) -> bool:
    if "\x00" in value:
        return True
    if value.isascii():
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _bad_scalar(value: Any) -> str | None:
    if isinstance(value, str):
        return "must not contain NUL characters or lone surrogates" if _bad_str(value) else None
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number"
    return None


def _document_ok(doc: Any, max_depth: int) -> bool:
    """Fast pass without paths: True when every value is acceptable."""
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            if depth > max_depth:
                return False
            for key, item in value.items():
                if _bad_str(key):
                    return False
                stack.append((item, depth + 1))
        elif isinstance(value, list):
            if depth > max_depth:
                return False
            stack.extend((item, depth + 1) for item in value)
        elif _bad_scalar(value) is not None:
            return False
    return True


def _first_bad(doc: Any, max_depth: int) -> tuple[str, str]:
    """Slow pass, only after the fast one failed: the first offending path."""
    stack: list[tuple[Any, str, int]] = [(doc, "$", 1)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, dict | list) and depth > max_depth:
            return path, f"nested deeper than {max_depth} levels"
        if isinstance(value, dict):
            for key, item in reversed(list(value.items())):
                if _bad_str(key):
                    return path, "keys must not contain NUL characters or lone surrogates"
                stack.append((item, key if path == "$" else f"{path}.{key}", depth + 1))
        elif isinstance(value, list):
            stack.extend((item, f"{path}[{i}]", depth + 1)
                         for i, item in reversed(list(enumerate(value))))
        elif (problem := _bad_scalar(value)) is not None:
            return path, problem
    return "$", "not acceptable"
