"""How often agents report and long-poll, scaled to the fleet (ADR 0160).

The fleet-wide report rate is capped the way Nomad caps heartbeats
(``max_heartbeats_per_second``: each client's TTL is ``clamp(N / rate, min, max)``): a
fleet of N agents is told to report every ``max(10 s, N / GPUPOOL_AGENT_REPORTS_PER_S)``
and to long-poll for ``clamp(N / GPUPOOL_AGENT_LONG_POLLS_PER_S, 30 s, 120 s)``, so the
portal's load from idle agents stays flat as the fleet grows. Convergence never waits for
either (the converged report is sent at once and a desired-state change wakes the
long-poll), so they set telemetry resolution and how soon a silent node counts as
unreachable: ``max(GPUPOOL_AGENT_UNREACHABLE_AFTER_S, 3 × heartbeat)``.

The answers travel in the enrolment response and in every report acknowledgement, so an
agent that enrolled into a small fleet follows the fleet as it grows. The count of
enrolled agents is read at most every ``CACHE_S`` per process.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass

from django.conf import settings

from portal.fleet.models import Agent

MIN_HEARTBEAT_S = 10
MIN_LONG_POLL_S = 30
MAX_LONG_POLL_S = 120  # below the 75 s keep-alive + proxy read timeouts of ADR 0140 × 2
MISSED_REPORTS = 3  # a node is unreachable after this many missed reports (§9)
DEFAULT_REPORTS_PER_S = 50.0  # Nomad's max_heartbeats_per_second default
DEFAULT_LONG_POLLS_PER_S = 100.0
DEFAULT_UNREACHABLE_AFTER_S = 30
CACHE_S = 30.0
HOLD_S = 3600.0


@dataclass(frozen=True)
class Intervals:
    heartbeat_s: int
    long_poll_s: int
    unreachable_after_s: int

    def wire(self) -> dict[str, int]:
        """The protocol fields (enrolment response and report acknowledgement)."""
        return {"heartbeat_interval_s": self.heartbeat_s,
                "long_poll_timeout_s": self.long_poll_s}


def for_fleet(agents: int) -> Intervals:
    """The intervals a fleet of ``agents`` enrolled agents is told (pure)."""
    reports = float(getattr(settings, "GPUPOOL_AGENT_REPORTS_PER_S", DEFAULT_REPORTS_PER_S))
    polls = float(getattr(settings, "GPUPOOL_AGENT_LONG_POLLS_PER_S",
                          DEFAULT_LONG_POLLS_PER_S))
    heartbeat = max(MIN_HEARTBEAT_S, math.ceil(agents / reports)) if reports > 0 \
        else MIN_HEARTBEAT_S
    long_poll = MIN_LONG_POLL_S if polls <= 0 else \
        min(MAX_LONG_POLL_S, max(MIN_LONG_POLL_S, math.ceil(agents / polls)))
    floor = int(getattr(settings, "GPUPOOL_AGENT_UNREACHABLE_AFTER_S",
                        DEFAULT_UNREACHABLE_AFTER_S))
    return Intervals(heartbeat, long_poll, max(floor, MISSED_REPORTS * heartbeat))


class _FleetSize:
    """The number of enrolled agents, re-read at most every ``CACHE_S`` seconds, held at
    its peak of the last ``HOLD_S``: when the fleet shrinks, agents learn the shorter
    interval only at their next acknowledgement (up to one long interval later), so the
    unreachable threshold must not shrink before they have."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: deque[tuple[float, int]] = deque()
        self._at = -math.inf

    def get(self) -> int:
        now = time.monotonic()
        with self._lock:
            if now - self._at >= CACHE_S:
                self._at = now
                self._seen.append((now, Agent.objects.filter(enrolled_at__isnull=False)
                                   .count()))
            while self._seen and now - self._seen[0][0] > HOLD_S:
                self._seen.popleft()
            return max((count for _, count in self._seen), default=0)

    def forget(self) -> None:
        with self._lock:
            self._seen.clear()
            self._at = -math.inf


FLEET_SIZE = _FleetSize()


def current() -> Intervals:
    """The intervals for the fleet as it is now (cached count; one query per ``CACHE_S``)."""
    return for_fleet(FLEET_SIZE.get())
