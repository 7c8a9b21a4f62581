"""The state groups of ``states.py`` (one home) agree with the transition table."""

from __future__ import annotations

from portal.leasing import allocation, desired, handover, states
from portal.leasing.models import LeaseState as S


def test_state_groups_nest_and_agree_with_the_table() -> None:
    assert states.GRANTING < states.ON_HARDWARE < states.HOLDING
    assert states.CONVERGING <= states.ON_HARDWARE
    assert not states.HOLDING & states.TERMINAL and not states.WAITING & states.HOLDING
    assert {s for s in S.values if not states.ALLOWED[s]} == states.TERMINAL
    # every granting state can be released (teardown is how access ends)
    assert all(S.RELEASING in states.ALLOWED[s] for s in states.GRANTING)
    assert states.ALLOWED[S.RELEASING] <= states.TERMINAL


def test_modules_use_the_groups_of_states_py() -> None:
    assert set(allocation.LINGERING) == states.ON_HARDWARE
    assert set(allocation.HOLDING_STATES) == states.HOLDING
    assert set(desired.GRANTING) == states.GRANTING
    assert handover.ON_HARDWARE is states.ON_HARDWARE
