"""The fleet's health policy, one table: signal → severity → action (issue 27, ADR 0185).

Pure: no models, no database. ``loader.effective_table()`` is the one place that reads
``django.conf.settings`` (``GPUPOOL_HEALTH_POLICY``).
"""

from portal.fleet.policy.guards import (
    BreakerState,
    CircuitBreaker,
    Decision,
    FlapGuard,
    FlapState,
    Outcome,
    ReplayGuard,
    ReplayState,
    RetryBudget,
    RetryState,
)
from portal.fleet.policy.overrides import load_file, merge
from portal.fleet.policy.signals import agent_silent, as_ts, signals_from_report
from portal.fleet.policy.table import Guards, PolicyTable, classify, default_table
from portal.fleet.policy.types import (
    Action,
    Kind,
    PolicyError,
    Rule,
    Scope,
    Severity,
    Signal,
    Verdict,
)

__all__ = [
    "Action", "BreakerState", "CircuitBreaker", "Decision", "FlapGuard", "FlapState",
    "Guards", "Kind", "Outcome", "PolicyError", "PolicyTable", "ReplayGuard", "ReplayState",
    "RetryBudget", "RetryState", "Rule", "Scope", "Severity", "Signal", "Verdict",
    "agent_silent", "as_ts", "classify", "default_table", "load_file", "merge",
    "signals_from_report",
]
