"""A small declarative schema for the wire protocol's bodies and query strings (stdlib only).

Every message is declared once (``agents.protocol.bodies``) with these specs;
:func:`problems` walks a parsed body against one and lists ``{field, problem}`` with the
dotted ``[i]`` paths of §4. Each spec carries the bounds of where the value ends up on
the portal (PostgreSQL ``smallint``/``integer``/``bigint`` columns, ``varchar(n)``,
finite ``float``), so a value that passes can be stored without a database error, and an
agent that checks its own report with the same spec never sends one the portal refuses.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypedDict

INT16_MAX = 2**15 - 1
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1
MAX_PROBLEMS = 50


class Problem(TypedDict):
    field: str
    problem: str


Check = Callable[[Any], "str | None"]


@dataclass(frozen=True)
class Spec:
    """Base of every spec; ``check`` adds a rule after the type and bounds passed."""

    check: Check | None = field(default=None, kw_only=True)

    def validate(self, value: Any, path: str, out: list[Problem]) -> None:
        raise NotImplementedError

    def ok(self, value: Any) -> bool:
        """The fast path (no field paths built): True when ``validate`` adds nothing."""
        out: list[Problem] = []
        self.validate(value, "", out)
        return not out


def _add(out: list[Problem], path: str, problem: str) -> None:
    if len(out) < MAX_PROBLEMS:
        out.append({"field": path, "problem": problem})


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Int(Spec):
    min: int = 0
    max: int = INT64_MAX
    message: str = ""  # one wording for type and minimum (counters: "an integer >= 0")

    def validate(self, value: Any, path: str, out: list[Problem]) -> None:
        if not _is_int(value):
            _add(out, path, self.message or "must be an integer")
        elif value < self.min:
            _add(out, path, self.message or f"must be >= {self.min}")
        elif value > self.max:
            _add(out, path, f"must be <= {self.max}")
        elif self.check is not None and (problem := self.check(value)):
            _add(out, path, problem)

    def ok(self, value: Any) -> bool:
        return type(value) is int and self.min <= value <= self.max and (
            self.check is None or self.check(value) is None)


@dataclass(frozen=True)
class Num(Spec):
    """An integer or a finite float in ``[min, max]``."""

    min: float = 0
    max: float = float(UINT64_MAX)

    def validate(self, value: Any, path: str, out: list[Problem]) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            _add(out, path, "must be an integer or a number")
        elif isinstance(value, float) and not math.isfinite(value):
            _add(out, path, "must be a finite number")
        elif value < self.min:
            _add(out, path, f"must be >= {self.min:g}")
        elif value > self.max:
            _add(out, path, f"must be <= {self.max:g}")

    def ok(self, value: Any) -> bool:
        kind = type(value)
        return (kind is int or (kind is float and math.isfinite(value))) \
            and self.min <= value <= self.max


@dataclass(frozen=True)
class Str(Spec):
    max_len: int = 256
    pattern: re.Pattern[str] | None = None
    pattern_message: str = ""
    choices: tuple[str, ...] = ()

    def validate(self, value: Any, path: str, out: list[Problem]) -> None:
        if not isinstance(value, str):
            _add(out, path, "must be a string")
        elif len(value) > self.max_len:
            _add(out, path, f"at most {self.max_len} characters")
        elif self.choices and value not in self.choices:
            _add(out, path, f"must be one of {', '.join(self.choices)}")
        elif self.pattern is not None and not self.pattern.match(value):
            _add(out, path, self.pattern_message or f"must match {self.pattern.pattern}")
        elif self.check is not None and (problem := self.check(value)):
            _add(out, path, problem)

    def ok(self, value: Any) -> bool:
        return type(value) is str and len(value) <= self.max_len \
            and (not self.choices or value in self.choices) \
            and (self.pattern is None or self.pattern.match(value) is not None) \
            and (self.check is None or self.check(value) is None)


@dataclass(frozen=True)
class Bool(Spec):
    def validate(self, value: Any, path: str, out: list[Problem]) -> None:
        if not isinstance(value, bool):
            _add(out, path, "must be a boolean")

    def ok(self, value: Any) -> bool:
        return type(value) is bool


@dataclass(frozen=True)
class Anything(Spec):
    """Any JSON value (still subject to :func:`parse_json`'s document-wide limits)."""

    def validate(self, value: Any, path: str, out: list[Problem]) -> None:
        return

    def ok(self, value: Any) -> bool:
        return True


@dataclass(frozen=True)
class Arr(Spec):
    """An array of ``item``; ``unique``: a key whose (present) values must differ between
    the array's objects (e.g. a GPU's NVML index)."""

    item: Spec = Anything()
    max_len: int = 1000
    unique: str = ""

    def validate(self, value: Any, path: str, out: list[Problem]) -> None:
        if not isinstance(value, list):
            _add(out, path, "must be an array")
            return
        if len(value) > self.max_len:
            _add(out, path, f"at most {self.max_len} items")
        for i, item in enumerate(value[: self.max_len]):
            if len(out) >= MAX_PROBLEMS:
                return
            self.item.validate(item, f"{path}[{i}]", out)
        for i in self._duplicates(value[: self.max_len]):
            _add(out, f"{path}[{i}].{self.unique}", "must be unique in the array")

    def _duplicates(self, items: list[Any]) -> list[int]:
        if not self.unique:
            return []
        seen: set[Any] = set()
        dups = []
        for i, item in enumerate(items):
            key = item.get(self.unique) if isinstance(item, dict) else None
            if key is None or isinstance(key, dict | list):
                continue
            if (type(key), key) in seen:
                dups.append(i)
            seen.add((type(key), key))
        return dups

    def ok(self, value: Any) -> bool:
        if type(value) is not list or len(value) > self.max_len:
            return False
        check = self.item.ok
        return all(check(item) for item in value) and not self._duplicates(value)


@dataclass(frozen=True)
class Map(Spec):
    """An object with free keys (at most ``key_len`` characters) and one value spec."""

    value: Spec = Anything()
    max_keys: int = 256
    key_len: int = 64

    def validate(self, value: Any, path: str, out: list[Problem]) -> None:
        if not isinstance(value, dict):
            _add(out, path, "must be an object")
            return
        if len(value) > self.max_keys:
            _add(out, path, f"at most {self.max_keys} keys")
        for key, item in list(value.items())[: self.max_keys]:
            if len(key) > self.key_len:
                _add(out, f"{path}.{key[:self.key_len]}…", f"key at most {self.key_len} characters")
            else:
                self.value.validate(item, f"{path}.{key}", out)

    def ok(self, value: Any) -> bool:
        if type(value) is not dict or len(value) > self.max_keys:
            return False
        check, key_len = self.value.ok, self.key_len
        return all(len(k) <= key_len and check(v) for k, v in value.items())


@dataclass(frozen=True)
class F:
    """A field of an :class:`Obj`: absent or ``null`` is "is required" unless optional."""

    name: str
    spec: Spec
    optional: bool = False


@dataclass(frozen=True)
class Obj(Spec):
    """An object with declared fields (validated in order); unknown keys are ignored (§1)
    but count against ``max_keys``."""

    fields: tuple[F, ...] = ()
    max_keys: int = 256

    def validate(self, value: Any, path: str, out: list[Problem]) -> None:
        if not isinstance(value, dict):
            _add(out, path or "$", "must be an object")
            return
        for f in self.fields:
            sub = f"{path}.{f.name}" if path else f.name
            if value.get(f.name) is None:
                if not f.optional:
                    _add(out, sub, "is required")
                continue
            f.spec.validate(value[f.name], sub, out)
        if len(value) > self.max_keys:
            _add(out, path or "$", f"at most {self.max_keys} keys")

    @cached_property
    def _checks(self) -> tuple[tuple[str, Callable[[Any], bool], bool], ...]:
        """``(name, spec.ok, optional)`` per field, bound once (the hot path of ``ok``)."""
        return tuple((f.name, f.spec.ok, f.optional) for f in self.fields)

    def ok(self, value: Any) -> bool:
        if type(value) is not dict or len(value) > self.max_keys:
            return False
        get = value.get
        for name, check, optional in self._checks:
            item = get(name)
            if item is None:
                if not optional:
                    return False
            elif not check(item):
                return False
        return True


def problems(spec: Spec, value: Any) -> list[Problem]:
    """Problems of ``value`` against ``spec``; empty means valid."""
    if spec.ok(value):
        return []
    out: list[Problem] = []
    spec.validate(value, "", out)
    return out


# --- query strings -----------------------------------------------------------------
def parse_query(params: Mapping[str, str], specs: Mapping[str, tuple[Spec, Any]],
                ) -> tuple[dict[str, Any], list[Problem]]:
    """Query parameters converted to the spec's type (``Int``/``Num``) and validated;
    ``specs`` maps a name to ``(spec, default)``."""
    values: dict[str, Any] = {}
    out: list[Problem] = []
    for name, (spec, default) in specs.items():
        raw = params.get(name)
        if raw is None:
            values[name] = default
            continue
        value = _convert(spec, raw)
        if value is None:
            _add(out, name, "must be an integer" if isinstance(spec, Int) else "must be a number")
            continue
        spec.validate(value, name, out)
        values[name] = value
    return values, out


def _convert(spec: Spec, raw: str) -> int | float | str | None:
    text = raw.strip()
    if len(text) > 40:
        return None
    try:
        if isinstance(spec, Int):
            return int(text) if re.fullmatch(r"[+-]?\d+", text) else None
        if isinstance(spec, Num):
            return float(text)
    except ValueError:
        return None
    return raw
