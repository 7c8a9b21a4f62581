"""The effective policy table and ``classify``: a signal in, a verdict (or nothing) out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache

from portal.fleet.policy.catalogue import xid_rules
from portal.fleet.policy.defaults import CODED_KINDS, signal_rules
from portal.fleet.policy.guards import CircuitBreaker, FlapGuard, RetryBudget
from portal.fleet.policy.types import Kind, Rule, Signal, Verdict


@dataclass(frozen=True)
class Guards:
    """The guards with their (possibly site-overridden) parameters."""

    flap: FlapGuard = field(default_factory=FlapGuard)
    breaker: CircuitBreaker = field(default_factory=CircuitBreaker)
    retry: RetryBudget = field(default_factory=RetryBudget)


@dataclass(frozen=True)
class PolicyTable:
    rules: Mapping[str, Rule]
    guards: Guards = field(default_factory=Guards)
    source: str = "defaults"  # or the override file's path

    def rule_for(self, signal: Signal) -> Rule:
        """The row that decides ``signal``: ``xid.<n>``/``recovery_action.<n>`` (else
        ``<kind>.default``) or the kind's own row."""
        if signal.kind in CODED_KINDS:
            row = self.rules.get(f"{signal.kind}.{_code(signal.value)}")
            return row or self.rules[f"{signal.kind}.default"]
        return self.rules[str(signal.kind)]


def _code(value: object) -> str:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else "?"


@cache
def default_table() -> PolicyTable:
    """The shipped table: the XID catalogue and the signal rows, default guards."""
    return PolicyTable(rules={**xid_rules(), **signal_rules()})


def _over_threshold(signal: Signal, rule: Rule) -> bool:
    limit = rule.params.get("per_hour")
    if signal.kind is not Kind.IB_SYMBOL_ERRORS or limit is None:
        return True
    return isinstance(signal.value, int | float) and float(signal.value) > limit


def _cause(signal: Signal, rule: Rule) -> str:
    if signal.kind in CODED_KINDS:
        return f"{signal.kind} {signal.value} on {signal.where()}: {rule.cause}"
    value = "" if signal.value is None or signal.value is True else f" ({signal.value})"
    if signal.kind is Kind.IB_SYMBOL_ERRORS:
        value = f" ({float(signal.value or 0):.0f}/h > {rule.params['per_hour']:g}/h)"
    return f"{signal.kind} on {signal.where()}{value}: {rule.cause}"


def classify(signal: Signal, table: PolicyTable | None = None) -> Verdict | None:
    """The verdict for ``signal`` under ``table`` (default: the shipped one). ``None`` when
    the signal is under its row's threshold (symbol errors at or below ``per_hour``)."""
    table = table or default_table()
    rule = table.rule_for(signal)
    if not _over_threshold(signal, rule):
        return None
    return Verdict(severity=rule.severity, action=rule.action, scope=rule.scope,
                   fence=rule.fence, cause=_cause(signal, rule), rule=rule.key)
