"""The agent client honours the portal's 429/Retry-After and pending approval, and does
not retry a refusal (4xx) at the 5xx pace; refused reports stay in the spool."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from agents.client.backoff import HoldOff
from agents.client.fakeportal import FakePortal
from agents.client.portal import Credential, PortalClient, PortalError, retry_after_s
from tests.agents.helpers import FakeClock, make_agent

CRED = Credential("nd_0123456789abcdef", "gpn_x")


def _err(status: int, code: str, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, headers=headers or {},
                          json={"error": {"code": code, "message": code, "details": []}})


class Scripted:
    """A transport answering from a list (the last answer repeats), counting requests."""

    def __init__(self, *answers: httpx.Response) -> None:
        self.answers, self.calls = list(answers), 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def _client(script: Scripted, clock: FakeClock) -> PortalClient:
    return PortalClient("http://portal.test", credential=CRED,
                        transport=httpx.MockTransport(script), hold=HoldOff(clock=clock))


def test_client_honours_429_retry_after() -> None:
    clock = FakeClock()
    script = Scripted(_err(429, "rate_limited", {"Retry-After": "30"}),
                      httpx.Response(204))
    client = _client(script, clock)
    with pytest.raises(PortalError) as err:
        client.desired_state(0)
    assert (err.value.status, err.value.retry_after) == (429, 30.0)
    clock.advance(10)
    with pytest.raises(PortalError) as held:
        client.desired_state(0)
    assert held.value.code == "rate_limited" and script.calls == 1  # no request sent
    clock.advance(21)
    assert client.desired_state(0) is None and script.calls == 2


def test_client_does_not_retry_4xx_at_the_5xx_pace() -> None:
    clock = FakeClock()
    script = Scripted(_err(401, "unauthenticated"))
    client = _client(script, clock)
    sent_at = []
    for _ in range(7200):  # two hours, one attempt a second (the agent's pace is slower)
        calls = script.calls
        with contextlib.suppress(PortalError):
            client.desired_state(0)
        if script.calls > calls:
            sent_at.append(clock.now)
        clock.advance(1)
    gaps = [b - a for a, b in zip(sent_at, sent_at[1:], strict=False)]
    assert gaps[:4] == [300, 600, 1200, 2400] and len(sent_at) == 5


def test_client_retries_5xx_and_400_without_holding() -> None:
    clock = FakeClock()
    script = Scripted(_err(503, "unavailable"), _err(400, "invalid_report"),
                      httpx.Response(204))
    client = _client(script, clock)
    for _ in range(2):
        with pytest.raises(PortalError):
            client.desired_state(0)
    assert client.desired_state(0) is None and script.calls == 3


def test_retry_after_http_date() -> None:
    now = datetime(2026, 12, 1, 9, 0, 0, tzinfo=UTC)
    assert retry_after_s("Tue, 01 Dec 2026 09:01:00 GMT", now) == 60.0
    assert retry_after_s("120") == 120.0
    assert retry_after_s("soon") is None and retry_after_s(None) is None


def test_pending_approval_enrolment_retries_slowly(tmp_path: Path) -> None:
    portal, clock = FakePortal(), FakeClock()
    script = Scripted(_err(409, "pending_approval", {"Retry-After": "60"}))
    agent, _, _ = make_agent(tmp_path, portal, clock, token="gpb_x",
                             transport=httpx.MockTransport(script))
    agent.client.hold = HoldOff(clock=clock)
    sent_at = []
    for _ in range(600):
        calls = script.calls
        agent.tick()
        if script.calls > calls:
            sent_at.append(clock.now)
        clock.advance(1)
    assert not agent.enrolled()
    assert len(sent_at) >= 5
    assert min(b - a for a, b in zip(sent_at, sent_at[1:], strict=False)) >= 60


def test_refused_reports_stay_in_the_spool(tmp_path: Path) -> None:
    portal, clock = FakePortal(), FakeClock()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/reports"):
            return _err(401, "unauthenticated")
        return portal.handle(request)

    agent, _, _ = make_agent(tmp_path, portal, clock, token=portal.issue_bootstrap_token(),
                             transport=httpx.MockTransport(handler))
    agent.client.hold = HoldOff(clock=clock)
    for _ in range(1800):  # an hour
        agent.tick()
        clock.advance(2)
    assert agent.enrolled() and agent.sent == 0 and agent.rejected == 0
    assert len(agent.spool) >= 300  # one report every 10 s, all kept
    assert agent.client.hold.refusals <= 5
