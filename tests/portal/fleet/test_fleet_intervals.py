"""Intervals scaled to the fleet (ADR 0160). Finding (issue 12): the portal told every
agent to report every 10 s whatever the fleet size — 1,000 reports/s at 10,000 nodes, ten
times what ingest is built for on two cores — and judged nodes unreachable after a fixed
30 s, so stretching the interval by hand made every node unreachable."""

from __future__ import annotations

from datetime import timedelta

import pytest

from portal.core import clock
from portal.fleet import intervals
from portal.fleet.services.health import health_sweep
from portal.inventory.models import Node
from tests.portal.fleet.helpers import report


@pytest.mark.parametrize(("agents", "heartbeat", "long_poll", "unreachable"), [
    (0, 10, 30, 30),
    (8, 10, 30, 30),
    (500, 10, 30, 30),
    (1_000, 20, 30, 60),
    (5_000, 100, 50, 300),
    (10_000, 200, 100, 600),
    (100_000, 2_000, 120, 6_000),
])
def test_intervals_keep_the_fleet_report_rate_flat(agents: int, heartbeat: int,
                                                   long_poll: int, unreachable: int) -> None:
    got = intervals.for_fleet(agents)
    assert (got.heartbeat_s, got.long_poll_s, got.unreachable_after_s) == \
        (heartbeat, long_poll, unreachable)
    assert agents / got.heartbeat_s <= intervals.DEFAULT_REPORTS_PER_S


def test_rates_and_floor_are_settings(settings) -> None:
    settings.GPUPOOL_AGENT_REPORTS_PER_S = 100
    settings.GPUPOOL_AGENT_LONG_POLLS_PER_S = 50
    settings.GPUPOOL_AGENT_UNREACHABLE_AFTER_S = 900
    got = intervals.for_fleet(10_000)
    assert (got.heartbeat_s, got.long_poll_s, got.unreachable_after_s) == (100, 120, 900)


@pytest.mark.django_db
def test_enrolment_and_acks_carry_the_fleets_intervals(agent_client, monkeypatch) -> None:
    monkeypatch.setattr(intervals.FLEET_SIZE, "get", lambda: 10_000)
    resp = agent_client.enrol()
    assert resp.status_code == 201
    assert (resp.json()["heartbeat_interval_s"], resp.json()["long_poll_timeout_s"]) == \
        (200, 100)
    ack = agent_client.report(report(agent_client.node_id, 1)).json()
    assert (ack["heartbeat_interval_s"], ack["long_poll_timeout_s"]) == (200, 100)


@pytest.mark.django_db
def test_unreachable_follows_the_stretched_heartbeat(agent_client, monkeypatch) -> None:
    monkeypatch.setattr(intervals.FLEET_SIZE, "get", lambda: 10_000)  # 200 s reports
    agent_client.enrol()
    agent_client.report(report(agent_client.node_id, 1))
    clock.advance(timedelta(seconds=400))  # two reports missed: not yet
    assert health_sweep() == 0
    clock.advance(timedelta(seconds=201))  # three missed
    assert health_sweep() == 1
    assert not Node.objects.get(hostname="gpu-node-01").health.reachable


@pytest.mark.django_db
def test_fleet_size_counts_enrolled_agents_and_is_cached(agent_client,
                                                         django_assert_num_queries) -> None:
    agent_client.enrol()
    intervals.FLEET_SIZE.forget()
    assert intervals.FLEET_SIZE.get() == 1
    with django_assert_num_queries(0):
        assert intervals.current().heartbeat_s == 10


def test_fleet_size_is_held_at_its_peak_for_an_hour(monkeypatch) -> None:
    """A fleet that shrinks keeps the long interval (and threshold) until every agent has
    been told the shorter one, so nobody is judged unreachable at the old pace."""
    counts = iter([10_000, 10, 10])
    now = [0.0]
    monkeypatch.setattr(intervals.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(intervals.Agent.objects, "filter",
                        lambda **_: type("Q", (), {"count": lambda self: next(counts)})())
    size = intervals._FleetSize()
    assert size.get() == 10_000
    now[0] = 60.0
    assert size.get() == 10_000  # re-read (10), peak held
    now[0] = 3_700.0
    assert size.get() == 10
