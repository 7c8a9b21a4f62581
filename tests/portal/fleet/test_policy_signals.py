"""``signals_from_report``: a report's delta as signals, nothing for an unchanged state."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from portal.fleet.policy import Kind, Signal, agent_silent, classify, signals_from_report

T0 = 1_800_000_000.0
PORT = ("mlx5_0", 1)


def gpu(**extra: Any) -> dict[str, Any]:
    return {"index": 0, "healthy": True, "uuid": "GPU-aaa", **extra}


def port(state: int = 4, phys: int = 5, **counters: int) -> dict[str, Any]:
    return {"device": "mlx5_0", "port": 1, "state_id": state, "phys_state_id": phys,
            "state": "ACTIVE" if state == 4 else "DOWN",
            "phys_state": "LinkUp" if phys == 5 else "Polling",
            "counters": {"link_downed": 0, "symbol_error": 0, **counters}, "saturated": []}


def gpu_signals(now: dict[str, Any], before: dict[str, Any] | None) -> list[Signal]:
    return signals_from_report("node-1", {0: now}, {0: before} if before else {}, {}, {}, [],
                               T0)


def kinds(signals: list[Signal]) -> list[tuple[str, Any]]:
    return [(str(s.kind), s.value) for s in signals]


@pytest.mark.parametrize(("before", "now", "expected"), [
    (gpu(ecc_uncorrected_volatile=1), gpu(ecc_uncorrected_volatile=3), [("ecc_dbe", 2)]),
    (gpu(ecc_uncorrected_volatile=3), gpu(ecc_uncorrected_volatile=3), []),
    (gpu(ecc_uncorrected_volatile=3), gpu(ecc_uncorrected_volatile=0), []),  # reset
    (None, gpu(ecc_uncorrected_volatile=3), []),  # no baseline
    (gpu(lost=False), gpu(lost=True), [("gpu_lost", True)]),
    (gpu(lost=True), gpu(lost=True), []),
    (gpu(), gpu(remapped_rows_pending=True), [("remap_pending", True)]),
    (gpu(remapped_rows_pending=True), gpu(remapped_rows_pending=True), []),
    (gpu(remapped_rows_failure=False), gpu(remapped_rows_failure=True), [("remap_failure", True)]),
    (gpu(clocks_event_reasons=0x1), gpu(clocks_event_reasons=0x41), [("thermal", 0x40)]),
    (gpu(clocks_event_reasons=0x40), gpu(clocks_event_reasons=0x60), [("thermal", 0x60)]),
    (gpu(clocks_event_reasons=0x40), gpu(clocks_event_reasons=0x40), []),
    (gpu(clocks_event_reasons=0), gpu(clocks_event_reasons=0x80), [("power_brake", 0x80)]),
    (gpu(clocks_event_reasons=0x4), gpu(clocks_event_reasons=0x4), []),  # SW power cap
    (gpu(recovery_action=0), gpu(recovery_action=2), [("recovery_action", 2)]),
    (gpu(recovery_action=2), gpu(recovery_action=2), []),
    (gpu(recovery_action=2), gpu(recovery_action=0), [("recovery_action", 0)]),
    (None, gpu(recovery_action=0), []),  # healthy from the start: nothing to say
    (gpu(last_xid=None), gpu(last_xid=79), [("xid", 79)]),
    (gpu(last_xid=79), gpu(last_xid=79), []),
])
def test_gpu_increment_vs_unchanged(before: dict[str, Any] | None, now: dict[str, Any],
                                    expected: list[tuple[str, Any]]) -> None:
    signals = gpu_signals(now, before)
    assert kinds(signals) == expected
    for s in signals:
        assert (s.node, s.gpu_index, s.gpu_uuid, s.at) == ("node-1", 0, "GPU-aaa", T0)


def test_stored_rows_with_data_are_read_as_the_previous_report() -> None:
    stored = {"index": 0, "ts": datetime.fromtimestamp(T0 - 10, UTC), "lost": False,
              "last_xid": None, "data": gpu(ecc_uncorrected_volatile=5)}
    assert kinds(gpu_signals(gpu(ecc_uncorrected_volatile=6), stored)) == [("ecc_dbe", 1)]


def port_signals(now: dict[str, Any], before: dict[str, Any] | None,
                 then: float = T0 - 60) -> list[Signal]:
    prev = {PORT: {"ts": datetime.fromtimestamp(then, UTC), "data": before}} if before else {}
    return signals_from_report("node-1", {}, {}, {PORT: now}, prev, [], T0)


def test_port_down_then_up_then_unchanged() -> None:
    down = port_signals(port(state=1, phys=2), port())
    assert kinds(down) == [("ib_port_down", "DOWN/Polling")]
    assert down[0].port == PORT and classify(down[0]).fence  # type: ignore[union-attr]
    assert kinds(port_signals(port(), port(state=1, phys=2))) == [("ib_port_up", "ACTIVE/LinkUp")]
    assert port_signals(port(state=1, phys=2), port(state=1, phys=2)) == []
    assert port_signals(port(), port()) == []


def test_link_downed_any_increment() -> None:
    assert kinds(port_signals(port(link_downed=4), port(link_downed=3))) == [("ib_link_downed", 1)]
    assert port_signals(port(link_downed=3), port(link_downed=3)) == []


@pytest.mark.parametrize(("errors", "interval_s", "rate", "fatal"), [
    (121, 3600, 121.0, True),  # over IBTA's limit
    (120, 3600, 120.0, False),  # at the limit: not over
    (3, 60, 180.0, True),  # 3 a minute is 180 an hour
    (1, 60, 60.0, False),
    (200, 7200, 100.0, False),
])
def test_symbol_errors_over_and_under_the_ber_limit(errors: int, interval_s: float,
                                                    rate: float, fatal: bool) -> None:
    signals = port_signals(port(symbol_error=10 + errors), port(symbol_error=10),
                           then=T0 - interval_s)
    assert kinds(signals) == [("ib_symbol_errors", pytest.approx(rate))]
    assert (classify(signals[0]) is not None) is fatal


def test_symbol_errors_unchanged_reset_or_no_interval_give_nothing() -> None:
    assert port_signals(port(symbol_error=10), port(symbol_error=10)) == []
    assert port_signals(port(symbol_error=0), port(symbol_error=10)) == []
    assert port_signals(port(symbol_error=99), port(symbol_error=10), then=T0) == []


def test_xid_events_are_deduplicated_and_not_repeated_by_last_xid() -> None:
    events = [{"gpu_uuid": "GPU-aaa", "xid": 48, "ts": T0 - 2},
              {"gpu_uuid": "GPU-aaa", "xid": 48, "ts": T0 - 2},  # the same event twice
              {"gpu_uuid": "GPU-aaa", "xid": 48, "ts": T0 - 1},  # a second occurrence
              {"gpu_uuid": "GPU-zzz", "xid": 79, "ts": T0 - 1}]  # a GPU not in this report
    signals = signals_from_report("node-1", {0: gpu(last_xid=48)}, {0: gpu(last_xid=13)},
                                  {}, {}, events, T0)
    assert [(s.value, s.gpu_index, s.gpu_uuid, s.at) for s in signals] == [
        (48, 0, "GPU-aaa", T0 - 2), (48, 0, "GPU-aaa", T0 - 1), (79, None, "GPU-zzz", T0 - 1)]


def test_unchanged_report_gives_no_signal() -> None:
    g = gpu(ecc_uncorrected_volatile=2, lost=False, last_xid=13, recovery_action=0,
            clocks_event_reasons=0x1, remapped_rows_pending=False, remapped_rows_failure=False)
    p = port(link_downed=1, symbol_error=5)
    prev_p = {"ts": T0 - 10, "data": p}
    assert signals_from_report("node-1", {0: g}, {0: dict(g)}, {PORT: p}, {PORT: prev_p}, [],
                               T0) == []


def test_agent_silent_signal() -> None:
    s = agent_silent("node-1", T0 - 45, datetime.fromtimestamp(T0, UTC))
    assert (s.kind, s.value, s.at) == (Kind.AGENT_SILENT, 45.0, T0)
    assert classify(s).rule == "agent_silent"  # type: ignore[union-attr]
    assert agent_silent("node-1", None, T0).value is None


def test_an_entrys_own_ts_is_its_reading_time() -> None:
    now = {**port(symbol_error=130), "ts": datetime.fromtimestamp(T0 - 1800, UTC)}
    prev = {PORT: {"ts": T0 - 3600, "data": port(symbol_error=10)}}
    [signal] = signals_from_report("node-1", {}, {}, {PORT: now}, prev, [], T0)
    assert signal.at == T0 - 1800 and signal.value == pytest.approx(240.0)  # 120 in 30 min
