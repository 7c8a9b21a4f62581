"""A site's overrides merged over the defaults: effective table = defaults ⊕ file.

```yaml
rules:                        # any row, by key; only the fields given change
  xid.31: {severity: fatal, action: reset_gpu, fence: true}
  ib_symbol_errors: {per_hour: 60}
guards:
  flap: {max_fences: 3, window_s: 86400}
  breaker: {window_s: 600, max_share: 0.2, min_nodes: 5}
  retry: {max_attempts: 3, attempt_timeout_s: 3600}
```

Anything wrong raises ``PolicyError`` naming the dotted key (``rules.xid.31.action``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from portal.fleet.policy.table import Guards, PolicyTable, default_table
from portal.fleet.policy.types import Action, PolicyError, Rule, Scope, Severity

CODED_KEY = re.compile(r"^(xid|recovery_action)\.(\d{1,9})$")
ENUMS: dict[str, type[Severity] | type[Action] | type[Scope]] = {
    "severity": Severity, "action": Action, "scope": Scope}
GUARD_LIMITS = {"max_share": (0.0, 1.0)}


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise PolicyError(where, f"must be a mapping, not {type(value).__name__}")
    return value


def _number(value: Any, where: str, *, integer: bool = False) -> float:
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or value <= 0:
        raise PolicyError(where, f"must be {'an integer' if integer else 'a number'} > 0, "
                          f"not {value!r}")
    return value


def _field(base: Rule, name: str, value: Any, where: str) -> dict[str, Any]:
    if name in ENUMS:
        choices = [str(c) for c in ENUMS[name]]
        if value not in choices:
            raise PolicyError(where, f"must be one of {', '.join(choices)}, not {value!r}")
        return {name: ENUMS[name](value)}
    if name == "fence":
        if not isinstance(value, bool):
            raise PolicyError(where, f"must be true or false, not {value!r}")
        return {"fence": value}
    if name == "cause":
        if not isinstance(value, str) or not value.strip():
            raise PolicyError(where, "must be a non-empty text")
        return {"cause": value.strip()}
    if name in base.params:
        return {"params": {**base.params, name: float(_number(value, where))}}
    allowed = [*ENUMS, "fence", "cause", *base.params]
    raise PolicyError(where, f"unknown field; a row has {', '.join(allowed)}")


def _base(key: str, rules: Mapping[str, Rule], where: str) -> Rule:
    if key in rules:
        return rules[key]
    coded = CODED_KEY.match(key)
    if coded is None:
        raise PolicyError(where, "unknown rule: a row is a signal kind, xid.<n>, "
                          "recovery_action.<n> or <kind>.default")
    default = rules[f"{coded.group(1)}.default"]
    return dataclasses.replace(default, key=key, cause=f"{key} (site rule)")


def _row(key: Any, fields: Any, rules: Mapping[str, Rule]) -> Rule:
    where = f"rules.{key}"
    base = _base(str(key), rules, where)
    changes: dict[str, Any] = {"source": "site"}
    for name, value in _mapping(fields, where).items():
        extra = _field(base, str(name), value, f"{where}.{name}")
        if "params" in extra and "params" in changes:
            extra["params"] = {**changes["params"], **extra["params"]}
        changes.update(extra)
    if len(changes) == 1:
        raise PolicyError(where, "empty row: give at least one field")
    return dataclasses.replace(base, **changes)


def _guard(name: str, current: Any, values: Any) -> Any:
    where = f"guards.{name}"
    fields = {f.name: f for f in dataclasses.fields(current)}
    changes: dict[str, Any] = {}
    for key, value in _mapping(values, where).items():
        if key not in fields:
            raise PolicyError(f"{where}.{key}", f"unknown parameter; {name} has "
                              f"{', '.join(fields)}")
        number = _number(value, f"{where}.{key}", integer=fields[key].type == "int")
        low, high = GUARD_LIMITS.get(str(key), (0.0, float("inf")))
        if not low < number <= high:
            raise PolicyError(f"{where}.{key}", f"must be in ({low:g}, {high:g}]")
        changes[str(key)] = number
    return dataclasses.replace(current, **changes)


def _guards(values: Any, guards: Guards) -> Guards:
    changes = {}
    for name, params in _mapping(values, "guards").items():
        if name not in {"flap", "breaker", "retry"}:
            raise PolicyError(f"guards.{name}", "unknown guard; there are flap, breaker, "
                              "retry")
        changes[name] = _guard(name, getattr(guards, name), params)
    return dataclasses.replace(guards, **changes)


def _section(top: Mapping[str, Any], name: str) -> Any:
    value = top.get(name)
    return {} if value is None else value


def merge(overrides: Any, base: PolicyTable | None = None, source: str = "site") -> PolicyTable:
    """``base`` (default: the shipped table) with ``overrides`` (the parsed file) applied."""
    base = base or default_table()
    if overrides is None:
        return base
    top = _mapping(overrides, "(file)")
    for key in top:
        if key not in {"rules", "guards"}:
            raise PolicyError(str(key), "unknown section; a policy file has rules, guards")
    rules = dict(base.rules)
    for key, fields in _mapping(_section(top, "rules"), "rules").items():
        rules[str(key)] = _row(key, fields, base.rules)
    guards = _guards(_section(top, "guards"), base.guards)
    return PolicyTable(rules=rules, guards=guards, source=source)


def load_file(path: str | Path, base: PolicyTable | None = None) -> PolicyTable:
    """The table with the YAML file at ``path`` merged; unreadable or bad: ``PolicyError``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError("(file)", f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PolicyError("(file)", f"{path} is not valid YAML: {exc}") from exc
    return merge(data, base, source=str(path))
