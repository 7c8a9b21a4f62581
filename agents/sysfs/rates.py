"""Per-second rates from two samples of InfiniBand counters.

A PMA counter that reached its maximum sticks there: the rate is *unknown*
("saturated"), never a number. A counter that went down was reset (driver reload,
``perfquery -R``): the interval's rate is unknown ("reset"). Data counters are
4-octet words and their rates are reported in bytes per second.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agents.sysfs.infiniband import DATA_COUNTERS, IbDevice, IbPort, counter_max


@dataclass
class PortRates:
    per_second: dict[str, float] = field(default_factory=dict)
    unknown: dict[str, str] = field(default_factory=dict)


def rate_name(counter: str) -> str:
    return counter.replace("_data", "_bytes") if counter in DATA_COUNTERS else counter


def counter_rate(
    name: str, prev: int, cur: int, dt: float, extended: bool
) -> tuple[float | None, str | None]:
    """Rate for one counter over ``dt`` seconds, or (None, reason)."""
    limit = counter_max(name, extended)
    if dt <= 0:
        return None, "no_interval"
    if cur >= limit:
        return None, "saturated"
    if prev >= limit or cur < prev:
        return None, "reset"
    scale = 4 if name in DATA_COUNTERS else 1
    return (cur - prev) * scale / dt, None


def hw_rate(prev: int, cur: int, dt: float) -> tuple[float | None, str | None]:
    if dt <= 0:
        return None, "no_interval"
    if cur < prev:
        return None, "reset"
    return (cur - prev) / dt, None


class RateTracker:
    """Keeps the previous sample per port and turns the next one into rates."""

    def __init__(self) -> None:
        self._prev: dict[tuple[str, int], tuple[float, IbPort]] = {}

    def update(self, devices: list[IbDevice], ts: float) -> dict[tuple[str, int], PortRates]:
        out: dict[tuple[str, int], PortRates] = {}
        for dev in devices:
            for port in dev.ports:
                key = (dev.name, port.port)
                previous = self._prev.get(key)
                self._prev[key] = (ts, port)
                if previous is not None:
                    out[key] = self._rates(previous[1], port, ts - previous[0])
        return out

    @staticmethod
    def _rates(prev: IbPort, cur: IbPort, dt: float) -> PortRates:
        rates = PortRates()
        for name, value in cur.counters.items():
            if name not in prev.counters:
                continue
            r, why = counter_rate(name, prev.counters[name], value, dt, cur.extended)
            _put(rates, rate_name(name), r, why)
        for name, value in cur.hw_counters.items():
            if name in prev.hw_counters:
                r, why = hw_rate(prev.hw_counters[name], value, dt)
                _put(rates, "hw_counters/" + name, r, why)
        return rates


def _put(rates: PortRates, name: str, value: float | None, why: str | None) -> None:
    if value is None:
        rates.unknown[name] = why or "unknown"
    else:
        rates.per_second[name] = value
