"""The guards around automatic remediation, including NVSentinel's users' failure modes."""

from __future__ import annotations

import json

from portal.fleet.policy import (
    BreakerState,
    CircuitBreaker,
    FlapGuard,
    FlapState,
    Outcome,
    ReplayGuard,
    ReplayState,
    RetryBudget,
    RetryState,
)

T0 = 1_800_000_000.0
HOUR = 3600.0


def roundtrip(state: object) -> object:
    """What the lead stores and reads back (jsonb)."""
    return type(state).from_json(json.loads(json.dumps(state.as_json())))  # type: ignore[attr-defined]


# --- FlapGuard -----------------------------------------------------------------------
def test_a_flapping_node_stays_out_until_cleared() -> None:
    guard, state = FlapGuard(), FlapState()
    for n in range(2):
        decision, state = guard.on_fence(state, T0 + n * HOUR)
        assert decision.outcome is Outcome.ALLOW
    decision, state = guard.on_fence(state, T0 + 2 * HOUR)
    assert decision.outcome is Outcome.HOLD_FOR_OPERATOR
    assert "until an operator clears it" in decision.reason
    state = roundtrip(state)  # type: ignore[assignment]
    assert guard.may_return(state).outcome is Outcome.HOLD_FOR_OPERATOR  # days later too
    state = guard.clear(state)
    assert guard.may_return(state).outcome is Outcome.ALLOW
    assert guard.on_fence(state, T0 + 3 * HOUR)[0].outcome is Outcome.ALLOW


def test_fences_outside_the_window_do_not_count() -> None:
    guard, state = FlapGuard(max_fences=3, window_s=24 * HOUR), FlapState()
    for n in range(5):  # one fence every 13 h: never 3 within 24 h
        decision, state = guard.on_fence(state, T0 + n * 13 * HOUR)
        assert decision.outcome is Outcome.ALLOW
    assert len(state.fences) == 2


# --- CircuitBreaker ------------------------------------------------------------------
def test_forty_percent_of_nodes_tripping_at_once_opens_the_breaker() -> None:
    breaker, state, fleet = CircuitBreaker(), BreakerState(), 20
    outcomes = []
    for n in range(8):  # 40 % of 20 nodes within a minute
        decision, state = breaker.on_node_out(state, f"node-{n}", T0 + n, fleet)
        outcomes.append(decision.outcome)
    # 4 nodes = 20 %: not over; the 5th (25 %, and at least 5) opens it; it stays open
    assert outcomes == [Outcome.ALLOW] * 4 + [Outcome.SUSPEND_AUTOMATION] * 4
    assert state.open and state.opened_at == T0 + 4
    assert "a bad rule or a facility event is not 40% of nodes failing" in decision.alert.lower()  # type: ignore[union-attr]


def test_breaker_needs_a_minimum_count_in_a_small_fleet() -> None:
    breaker, state = CircuitBreaker(), BreakerState()
    for n in range(4):  # 4 of 5 nodes = 80 %, but fewer than 5 nodes
        decision, state = breaker.on_node_out(state, f"node-{n}", T0, 5)
    assert decision.outcome is Outcome.ALLOW and not state.open


def test_same_node_twice_counts_once() -> None:
    breaker, state = CircuitBreaker(min_nodes=2, max_share=0.1), BreakerState()
    for _ in range(3):
        decision, state = breaker.on_node_out(state, "node-1", T0, 10)
    assert decision.outcome is Outcome.ALLOW and len(state.outages) == 1


def test_breaker_closes_after_the_window_or_on_reset() -> None:
    breaker, state = CircuitBreaker(), BreakerState()
    for n in range(6):
        _, state = breaker.on_node_out(state, f"node-{n}", T0, 20)
    state = roundtrip(state)  # type: ignore[assignment]
    decision, state = breaker.check(state, T0 + 300, 20)
    assert decision.outcome is Outcome.SUSPEND_AUTOMATION and state.open
    decision, state = breaker.check(state, T0 + 601, 20)  # the window passed
    assert decision.outcome is Outcome.ALLOW and not state.open and state.outages == ()
    for n in range(6):
        _, state = breaker.on_node_out(state, f"node-{n}", T0 + 1000, 20)
    assert state.open
    state = breaker.reset(state)
    assert breaker.check(state, T0 + 1001, 20)[0].outcome is Outcome.ALLOW


# --- RetryBudget ---------------------------------------------------------------------
def test_stuck_remediation_escalates_after_the_cap() -> None:
    budget, state = RetryBudget(max_attempts=3, attempt_timeout_s=HOUR), RetryState()
    now = T0
    for attempt in range(3):  # each reboot "in progress" forever: never reports back
        decision, state = budget.begin(state, now)
        assert decision.outcome is Outcome.ATTEMPT, attempt
        assert budget.begin(state, now + 60)[0].outcome is Outcome.WAIT
        now += HOUR + 1  # overdue: counts as failed
    decision, state = budget.check(state, now)
    assert decision.outcome is Outcome.ESCALATE and state.escalated
    assert "a person takes over" in decision.reason
    state = roundtrip(state)  # type: ignore[assignment]
    assert budget.begin(state, now + 10 * HOUR)[0].outcome is Outcome.ESCALATE


def test_failed_attempts_retry_then_escalate_and_success_refills() -> None:
    budget, state = RetryBudget(max_attempts=2), RetryState()
    decision, state = budget.begin(state, T0)
    state = budget.failed(state)
    decision, state = budget.begin(state, T0 + 1)
    assert decision.outcome is Outcome.ATTEMPT and state.attempts == 2
    state = budget.failed(state)
    assert budget.begin(state, T0 + 2)[0].outcome is Outcome.ESCALATE
    state = budget.succeeded(state)
    assert budget.begin(state, T0 + 3)[0].outcome is Outcome.ATTEMPT


# --- ReplayGuard ---------------------------------------------------------------------
def test_a_stale_event_replayed_after_a_restart_is_ignored() -> None:
    guard, state = ReplayGuard(), ReplayState()
    decision, state = guard.admit(state, T0)  # XID 79 → the node is rebooted
    assert decision.outcome is Outcome.PROCESS
    state = guard.returned(state, T0 + 900)  # back in service after the reboot
    state = roundtrip(state)  # type: ignore[assignment]
    # the portal restarts and the agent's buffer replays the same event: no second reboot
    decision, same = guard.admit(state, T0)
    assert decision.outcome is Outcome.IGNORE and same == state
    # an event from before the return to service (a report delayed in a queue) too
    assert guard.admit(state, T0 + 600)[0].outcome is Outcome.IGNORE
    assert guard.admit(state, T0 + 901)[0].outcome is Outcome.PROCESS


def test_an_event_not_newer_than_the_last_processed_is_ignored() -> None:
    guard = ReplayGuard()
    _, state = guard.admit(ReplayState(), T0 + 10)
    assert guard.admit(state, T0 + 10)[0].outcome is Outcome.IGNORE
    assert guard.admit(state, T0 + 5)[0].outcome is Outcome.IGNORE
    decision, state = guard.admit(state, T0 + 11)
    assert decision.outcome is Outcome.PROCESS and state.last_event_at == T0 + 11


def test_empty_stored_state_is_the_initial_state() -> None:
    assert FlapState.from_json(None) == FlapState()
    assert BreakerState.from_json({}) == BreakerState()
