"""Guards around automatic remediation (NVSentinel's users' failure modes). Pure: a guard
holds its parameters; each call takes the stored state and ``now`` (float Unix seconds)
and returns a ``Decision`` and the new state, which the caller stores (``as_json`` /
``from_json``: plain JSON for a PostgreSQL ``jsonb`` column).

- ``FlapGuard`` (per part): fenced ``max_fences`` times within ``window_s`` → held out
  until an operator clears it.
- ``CircuitBreaker`` (fleet-wide): more than ``max_share`` of the fleet's nodes (and at
  least ``min_nodes``) newly out of service within ``window_s`` → automation suspended.
- ``RetryBudget`` (per part): at most ``max_attempts`` remediation attempts, an attempt
  without an outcome after ``attempt_timeout_s`` counts as failed → escalate to a person.
- ``ReplayGuard`` (per part): an event not newer than the last one processed, or not
  newer than the part's last return to service / operator clear, is ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Outcome(StrEnum):
    ALLOW = "allow"
    HOLD_FOR_OPERATOR = "hold_for_operator"
    SUSPEND_AUTOMATION = "suspend_automation"
    ATTEMPT = "attempt"
    WAIT = "wait"  # an attempt is in progress and not yet overdue
    ESCALATE = "escalate"
    PROCESS = "process"
    IGNORE = "ignore"


@dataclass(frozen=True)
class Decision:
    outcome: Outcome
    reason: str
    alert: str | None = None  # text for operators (the breaker)


class _State:
    def as_json(self) -> dict[str, Any]:
        return dict(vars(self))

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Any:
        if not data:
            return cls()
        return cls(**{k: tuple(map(_tuple, v)) if isinstance(v, list) else v
                      for k, v in data.items()})


def _tuple(item: Any) -> Any:
    return tuple(item) if isinstance(item, list) else item


# --- flapping ------------------------------------------------------------------------
@dataclass(frozen=True)
class FlapState(_State):
    fences: tuple[float, ...] = ()  # when the part was fenced, within the window
    held: bool = False


@dataclass(frozen=True)
class FlapGuard:
    max_fences: int = 3
    window_s: float = 24 * 3600.0

    def on_fence(self, state: FlapState, now: float) -> tuple[Decision, FlapState]:
        """The part was fenced at ``now``: record it; the Nth fence in the window holds it."""
        fences = (*(t for t in state.fences if now - t < self.window_s), now)
        held = state.held or len(fences) >= self.max_fences
        new = FlapState(fences=fences, held=held)
        return self.may_return(new), new

    def may_return(self, state: FlapState) -> Decision:
        """May the part go back to service automatically?"""
        if state.held:
            return Decision(Outcome.HOLD_FOR_OPERATOR,
                            f"fenced {len(state.fences)} times within "
                            f"{self.window_s / 3600:g} h: stays out until an operator clears it")
        return Decision(Outcome.ALLOW, "not flapping")

    def clear(self, state: FlapState) -> FlapState:
        """An operator cleared the part: history forgotten."""
        return FlapState()


# --- circuit breaker -----------------------------------------------------------------
@dataclass(frozen=True)
class BreakerState(_State):
    outages: tuple[tuple[str, float], ...] = ()  # (node key, when it went out)
    open: bool = False
    opened_at: float | None = None


BREAKER_ALERT = ("automatic fencing suspended: {count} of {fleet} nodes ({share:.0%}) went "
                 "out of service within {window:g} min, over the {limit:.0%} limit. A bad "
                 "rule or a facility event is not {share:.0%} of nodes failing: check, then "
                 "reset the breaker")


@dataclass(frozen=True)
class CircuitBreaker:
    window_s: float = 600.0
    max_share: float = 0.20
    min_nodes: int = 5

    def _recent(self, state: BreakerState, now: float) -> tuple[tuple[str, float], ...]:
        return tuple(o for o in state.outages if now - o[1] < self.window_s)

    def _tripped(self, outages: tuple[tuple[str, float], ...], fleet: int) -> bool:
        count = len({node for node, _ in outages})
        return count >= self.min_nodes and count > self.max_share * max(fleet, 1)

    def _decision(self, state: BreakerState, fleet: int) -> Decision:
        if not state.open:
            return Decision(Outcome.ALLOW, "breaker closed")
        count = len({node for node, _ in state.outages})
        return Decision(Outcome.SUSPEND_AUTOMATION, "breaker open", BREAKER_ALERT.format(
            count=count, fleet=fleet, share=count / max(fleet, 1),
            window=self.window_s / 60, limit=self.max_share))

    def on_node_out(self, state: BreakerState, node: str, now: float,
                    fleet_size: int) -> tuple[Decision, BreakerState]:
        """``node`` is going out of service at ``now`` (before fencing it): allowed, or
        automation is suspended (the node is not fenced automatically)."""
        outages = tuple(o for o in self._recent(state, now) if o[0] != node)
        outages = (*outages, (node, now))
        opens = not state.open and self._tripped(outages, fleet_size)
        new = BreakerState(outages=outages, open=state.open or opens,
                           opened_at=now if opens else state.opened_at)
        return self._decision(new, fleet_size), new

    def check(self, state: BreakerState, now: float,
              fleet_size: int) -> tuple[Decision, BreakerState]:
        """Re-evaluate at ``now``: an open breaker closes once the window holds fewer
        outages than the threshold."""
        outages = self._recent(state, now)
        still = state.open and self._tripped(outages, fleet_size)
        new = BreakerState(outages=outages, open=still,
                           opened_at=state.opened_at if still else None)
        return self._decision(new, fleet_size), new

    def reset(self, state: BreakerState) -> BreakerState:
        """An operator closed the breaker."""
        return BreakerState()


# --- retry budget --------------------------------------------------------------------
@dataclass(frozen=True)
class RetryState(_State):
    attempts: int = 0
    in_progress_since: float | None = None
    escalated: bool = False


@dataclass(frozen=True)
class RetryBudget:
    max_attempts: int = 3
    attempt_timeout_s: float = 3600.0

    def _escalate(self, state: RetryState) -> tuple[Decision, RetryState]:
        new = RetryState(attempts=state.attempts, escalated=True)
        return Decision(Outcome.ESCALATE, f"{state.attempts} remediation attempts failed: "
                        "a person takes over"), new

    def begin(self, state: RetryState, now: float) -> tuple[Decision, RetryState]:
        """Start an attempt (``ATTEMPT``), or ``WAIT`` for the one in progress, or
        ``ESCALATE`` when the budget is spent."""
        decision, state = self.check(state, now)
        if decision.outcome is not Outcome.ATTEMPT:
            return decision, state
        return decision, RetryState(attempts=state.attempts + 1, in_progress_since=now)

    def check(self, state: RetryState, now: float) -> tuple[Decision, RetryState]:
        """Where the part stands: an attempt overdue by ``attempt_timeout_s`` counts as
        failed (a reboot that never reported back is not in progress forever)."""
        if state.escalated:
            return self._escalate(state)
        if state.in_progress_since is not None:
            if now - state.in_progress_since < self.attempt_timeout_s:
                return Decision(Outcome.WAIT, "an attempt is in progress"), state
            state = RetryState(attempts=state.attempts)
        if state.attempts >= self.max_attempts:
            return self._escalate(state)
        return Decision(Outcome.ATTEMPT, f"attempt {state.attempts + 1} of "
                        f"{self.max_attempts}"), state

    def failed(self, state: RetryState) -> RetryState:
        """The attempt in progress failed (the next ``begin`` retries or escalates)."""
        return RetryState(attempts=state.attempts, escalated=state.escalated)

    def succeeded(self, state: RetryState) -> RetryState:
        """The part is back in service (or an operator cleared it): budget refilled."""
        return RetryState()


# --- replays -------------------------------------------------------------------------
@dataclass(frozen=True)
class ReplayState(_State):
    last_event_at: float | None = None
    returned_at: float | None = None  # last return to service or operator clear


@dataclass(frozen=True)
class ReplayGuard:
    def admit(self, state: ReplayState, event_at: float) -> tuple[Decision, ReplayState]:
        """``PROCESS`` an event newer than anything processed and than the part's return
        to service; ``IGNORE`` a stale one (a replay after a restart)."""
        if state.returned_at is not None and event_at <= state.returned_at:
            return Decision(Outcome.IGNORE, "event not newer than the part's return to "
                            "service: stale"), state
        if state.last_event_at is not None and event_at <= state.last_event_at:
            return Decision(Outcome.IGNORE, "event not newer than the last one processed: "
                            "replayed"), state
        return Decision(Outcome.PROCESS, "new event"), ReplayState(
            last_event_at=event_at, returned_at=state.returned_at)

    def returned(self, state: ReplayState, now: float) -> ReplayState:
        """The part returned to service (or an operator cleared it) at ``now``."""
        return ReplayState(last_event_at=state.last_event_at, returned_at=now)


__all__ = ["BreakerState", "CircuitBreaker", "Decision", "FlapGuard", "FlapState",
           "Outcome", "ReplayGuard", "ReplayState", "RetryBudget", "RetryState"]
