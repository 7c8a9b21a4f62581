"""Which tenant roles a set of claims earns (pure: rules in, grants out)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from portal.sso.models import MappingRule


def _claim_values(claims: dict[str, Any], name: str) -> list[str]:
    raw = claims.get(name)
    if raw is None:
        return []
    items = raw if isinstance(raw, list | tuple) else [raw]
    return [str(v) for v in items]


def rule_matches(rule: MappingRule, claims: dict[str, Any]) -> bool:
    have = _claim_values(claims, rule.claim)
    wanted = rule.value_list()
    if rule.match == MappingRule.Match.ANY_ONE_OF:
        return any(v in wanted for v in have)
    if rule.match == MappingRule.Match.NOT_ANY_OF:
        return bool(have) and not any(v in wanted for v in have)
    if rule.match == MappingRule.Match.ENDS_WITH:
        return any(v.lower().endswith(w.lower()) for v in have for w in wanted)
    if rule.match == MappingRule.Match.REGEX:
        return bool(wanted) and any(re.fullmatch(wanted[0], v) for v in have)
    return False


def grants(rules: Iterable[MappingRule], claims: dict[str, Any]) -> dict[Any, list[str]]:
    """tenant id → the roles the matching rules give there."""
    out: dict[Any, list[str]] = {}
    for rule in rules:
        if rule.enabled and rule_matches(rule, claims):
            out.setdefault(rule.tenant_id, []).append(rule.role)
    return out
