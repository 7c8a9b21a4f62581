"""The agent follows the intervals the portal gives (§8, ADR 0160): the portal stretches
them as the fleet grows, so an agent that enrolled into a small fleet must follow the
report acknowledgements, not keep its own 10 s for ever (finding: the agent used its
configured ``report_interval_s`` whatever the portal said)."""

from __future__ import annotations

from pathlib import Path

from agents import protocol
from agents.client.fakeportal import FakePortal
from tests.agents.helpers import FakeClock, make_agent


def _reports_in(agent, clock: FakeClock, seconds: float) -> int:  # type: ignore[no-untyped-def]
    before = agent.sent
    end = clock.now + seconds
    while clock.now < end:
        agent.tick()
        clock.advance(1.0)
    return int(agent.sent - before)


def test_agent_reports_at_the_interval_the_enrolment_gives(tmp_path: Path) -> None:
    portal, clock = FakePortal(heartbeat_interval_s=100, long_poll_timeout_s=90), FakeClock()
    agent, _, _ = make_agent(tmp_path, portal, clock, token=portal.issue_bootstrap_token())
    agent.tick()  # enrols
    assert agent.report_interval_s == 100
    assert agent.long_poll_s == 90
    assert _reports_in(agent, clock, 300) <= 4  # not 30 at its own 10 s


def test_agent_follows_a_fleet_that_grows_through_report_acks(tmp_path: Path) -> None:
    portal, clock = FakePortal(), FakeClock()
    agent, _, _ = make_agent(tmp_path, portal, clock, token=portal.issue_bootstrap_token())
    assert _reports_in(agent, clock, 60) >= 5  # 10 s at first
    portal.heartbeat_interval_s, portal.long_poll_timeout_s = 200, 120
    _reports_in(agent, clock, 11)  # the next ack carries the new intervals
    assert agent.report_interval_s == 200
    assert agent.long_poll_s == 120
    assert _reports_in(agent, clock, 400) <= 3


def test_agent_never_reports_faster_than_configured(tmp_path: Path) -> None:
    portal, clock = FakePortal(heartbeat_interval_s=2), FakeClock()
    agent, _, _ = make_agent(tmp_path, portal, clock, token=portal.issue_bootstrap_token())
    agent.tick()
    assert agent.client.advice.heartbeat_s == 2
    assert agent.report_interval_s == 10  # max(configured, the portal's)


def test_out_of_bounds_advice_is_ignored() -> None:
    for bad in (0, -1, True, "10", 1.5, protocol.MAX_HEARTBEAT_S + 1, None):
        assert protocol.interval_advice({"heartbeat_interval_s": bad}).heartbeat_s is None
    assert protocol.interval_advice(
        {"long_poll_timeout_s": protocol.MAX_LONG_POLL_S + 1}).long_poll_s is None
