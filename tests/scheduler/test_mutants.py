"""The stateful property test can fail: each deliberately broken core (a *mutant*) must
be caught by :class:`Scheduling`'s invariants and rule assertions.

Without these, a checker that silently stopped checking (a vacuous invariant, rules
that never place anything) would still pass. Hypothesis runs derandomised and without
shrinking here, so the check is deterministic and fast.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.errors import FlakyFailure
from hypothesis.stateful import run_state_machine_as_test

from scheduler import engine, nodestate

from .test_properties import Scheduling

MUTANT_SETTINGS = settings(
    max_examples=100, stateful_step_count=25, deadline=None, derandomize=True,
    phases=[Phase.generate], suppress_health_check=list(HealthCheck), database=None,
)


def _fractional_ignores_room(domains: Any, milli: int) -> Any:
    """Broken GPU filter: any GPU with some room takes any share (over-commits)."""
    return nodestate_fractional(domains, 1)


nodestate_fractional: Callable[[Any, int], Any] = nodestate._fractional_options


def _host_ignores_models(key: Any, shape: Any) -> bool:
    """Broken model filter: the allowed-models list is ignored."""
    return bool(key[3] >= shape.cpu and key[4] >= shape.mem)


def _no_preemption(*_: Any, **__: Any) -> list[Any]:
    """Broken preemption: nothing is ever reclaimable (guarantees become unreachable)."""
    return []


MUTANTS = {
    "overcommit_gpu": (nodestate, "_fractional_options", _fractional_ignores_room),
    "ignore_models": (nodestate, "fits_host", _host_ignores_models),
    "no_preemption": (engine, "reclaimable", _no_preemption),
}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_stateful_checker_catches_a_broken_core(name, monkeypatch):
    module, attr, broken = MUTANTS[name]
    monkeypatch.setattr(module, attr, broken)
    with pytest.raises((AssertionError, FlakyFailure)):
        run_state_machine_as_test(Scheduling, settings=MUTANT_SETTINGS)

