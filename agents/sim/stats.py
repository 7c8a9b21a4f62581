"""Counters and per-endpoint latencies of ``agents.sim.fleet`` (what the agents see)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def percentile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of an already sorted list; 0 for none."""
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Stats:
    counts: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, list[float]] = field(default_factory=dict)
    # Where the current window began: per endpoint, how many values came before it
    # (``mark``); None: no window, the whole run only.
    marked: dict[str, int] | None = None

    def count(self, key: str) -> None:
        self.counts[key] = self.counts.get(key, 0) + 1

    def error(self, endpoint: str, kind: str) -> None:
        key = f"{endpoint} {kind}"
        self.errors[key] = self.errors.get(key, 0) + 1

    def took(self, endpoint: str, seconds: float) -> None:
        self.seconds.setdefault(endpoint, []).append(seconds)

    def mark(self) -> None:
        """Start a measurement window here (``latency(window=True)`` reads from it)."""
        self.marked = {endpoint: len(values) for endpoint, values in self.seconds.items()}

    def latency(self, window: bool = False) -> dict[str, dict[str, float]]:
        """Per endpoint: n, p50/p90/p99/max in ms (``window``: since ``mark`` only).
        ``long_poll_late``: how long after its ``wait`` an empty long-poll was answered
        (the server's lag, not the wait)."""
        out = {}
        for endpoint, values in sorted(self.seconds.items()):
            if window:
                values = values[(self.marked or {}).get(endpoint, 0):]
                if not values:
                    continue
            ordered = sorted(values)
            out[endpoint] = {"n": len(ordered),
                             **{f"p{int(q * 100)}_ms": round(percentile(ordered, q) * 1000, 1)
                                for q in (0.5, 0.9, 0.99)},
                             "max_ms": round(ordered[-1] * 1000, 1)}
        return out

    def summary(self) -> dict[str, Any]:
        out = {**self.counts, "errors": dict(self.errors), "latency": self.latency()}
        if self.marked is not None:
            out["latency_window"] = self.latency(window=True)
        return out
