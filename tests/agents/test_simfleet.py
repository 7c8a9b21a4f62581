"""The HTTP agent simulator speaks the agent protocol over real HTTP (issue 12)."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import datetime
from pathlib import Path

from agents import protocol
from agents.client.fakeportal import FakePortal, serve
from agents.sim.fleet import amain, parser_for_tests
from agents.sim.node import SimNode, telemetry_template

PKEY = "0x0101"


def _drive(portal: FakePortal, count: int, stop: threading.Event,
           set_at: dict[str, float]) -> None:  # fmt: skip
    """Operator side: once every node has enrolled, give each a partition on its port."""
    while not stop.is_set() and len(portal.nodes) < count:
        time.sleep(0.02)
    time.sleep(0.2)  # the long-polls are waiting
    for node_id, node in list(portal.nodes.items()):
        set_at[node_id] = time.time()
        portal.set_desired(node_id, partitions=[
            {"name": "tenant_a", "pkey": PKEY, "membership": "full", "ipoib": False,
             "port_guids": [_GUIDS[node.hostname]]}], access_grants=[])


_GUIDS: dict[str, str] = {}


def test_simulator_multiplexes_identities_over_http_and_echoes_generation(
        tmp_path: Path) -> None:
    """Finding (issue 12): the simulator ran the agent code per node in threads and never
    long-polled; now N identities in one asyncio process enrol (one token each), long-poll,
    and report the generation the moment it is applied, not at the next heartbeat."""
    portal = FakePortal()
    server = serve(portal)
    count = 12
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("\n".join(portal.issue_bootstrap_token() for _ in range(count)))
    for i in range(1, count + 1):  # the simulator's own derived GUIDs (no --inventory)
        _GUIDS[f"sim-node-{i:05d}"] = f"0x{0x0002C90300000000 + (i - 1) * 16 + 1:016x}"
    host, port = server.server_address[:2]
    args = parser_for_tests().parse_args([
        "--portal", f"http://{host}:{port}", "--nodes", str(count), "--tokens-file",
        str(tokens), "--report-interval", "600", "--long-poll", "2", "--apply-delay", "0.05",
        "--duration", "3"])
    stop, set_at = threading.Event(), {}
    driver = threading.Thread(target=_drive, args=(portal, count, stop, set_at), daemon=True)
    driver.start()
    try:
        summary = asyncio.run(amain(args))
    finally:
        stop.set()
        server.shutdown()
    assert summary["enrolled"] == count and summary["errors"] == {}
    assert len({n.node_id for n in portal.nodes.values()}) == count
    assert portal.rejected == []  # every report valid by the protocol's own validator
    assert set(set_at) == set(portal.nodes)
    for node_id, node in portal.nodes.items():
        done = [r for r in node.reports if r["observed"]["generation_applied"] == 1]
        assert done, f"{node.hostname} never reported generation 1"
        first = done[0]
        sent = datetime.fromisoformat(first["created_at"]).timestamp()
        assert sent - set_at[node_id] < 1.0  # at once (heartbeats are 600 s apart)
        parts = first["observed"]["partitions"]
        assert parts and all(p["in_sync"] for p in parts)
        assert "0x8101" in parts[0]["pkeys"]


def test_sim_node_report_is_valid_and_shaped_like_the_agent() -> None:
    template = telemetry_template("h100x8")
    node = SimNode.build(3, "node-0003", "tok", {"ports": [["mlx5_0", 1, "0x0000000000000abc",
                                                          "0x0000000000000ab0"]],
                                                "gpus": ["GPU-known-0"]}, template, "1.0")
    node.node_id = "nd_x"
    report = node.report(time.time())
    assert protocol.validate_report(report) == []
    sample = report["telemetry"][0]
    assert len(sample["gpus"]) == 8 and sample["gpus"][0]["uuid"] == "GPU-known-0"
    assert len({g["uuid"] for g in sample["gpus"]}) == 8
    assert sample["ib_ports"][0]["port_guid"] == "0x0000000000000abc"
    assert sample["host"]["hostname"] == "node-0003"
    assert protocol.validate_enrol(node.enrol_request()) == []
    node.apply({"generation": 2, "partitions": [
        {"pkey": "0x0102", "membership": "limited", "port_guids": ["0x0000000000000abc"]}]})
    obs = node.observed()
    assert obs["generation_applied"] == 2 and obs["partitions"][0]["in_sync"]
    assert obs["partitions"][0]["pkeys"] == ["0xffff", "0x0102"]
    node.apply({"generation": 1, "partitions": []})  # stale: ignored
    assert node.observed()["generation_applied"] == 2


def test_regular_reports_are_spread_evenly_one_slot_per_node(tmp_path: Path) -> None:
    """Finding (issue 12): every identity ran its own heartbeat task from a random start;
    now ONE scheduler gives node i slot i of the interval (jittered inside it), so N nodes
    send N reports per interval, evenly, and none bunch up."""
    from agents.sim.fleet import Fleet

    count, interval = 200, 2.0
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("\n".join(f"t{i}" for i in range(count)))
    args = parser_for_tests().parse_args([
        "--portal", "http://127.0.0.1:9", "--nodes", str(count), "--tokens-file", str(tokens),
        "--report-interval", str(interval)])
    template = telemetry_template("h100x8")
    nodes = [SimNode.build(i, f"n{i}", "t", None, template, "1") for i in range(count)]
    sent: list[tuple[float, int]] = []

    async def main() -> None:
        fleet = Fleet(args, nodes)

        async def report(node: SimNode, why: str = "reports") -> None:
            sent.append((time.monotonic() - fleet.epoch, node.index))

        fleet.report = report  # type: ignore[method-assign]
        for node in nodes:
            fleet._schedule(node, after=fleet.epoch)
        fleet.interval_known.set()
        task = asyncio.create_task(fleet.heartbeats())
        await asyncio.sleep(interval * 1.5)
        task.cancel()

    asyncio.run(main())
    first = [(t, i) for t, i in sent if t < interval]
    assert sorted(i for _, i in first) == list(range(count))  # each node once per interval
    slot = interval / count
    for t, i in first:
        assert i * slot - 0.15 <= t <= (i + 1) * slot + 0.15  # in its own slot (+ tick)
    gaps = [b[0] - a[0] for a, b in zip(sorted(first), sorted(first)[1:], strict=False)]
    assert max(gaps) < 0.2  # no bunching, no long silence


def test_simulator_follows_the_intervals_the_portal_gives(tmp_path: Path) -> None:
    """As the agent does (ADR 0160): the enrolment's and every ack's intervals, unless the
    command line fixes them; a changed interval moves the next slot, not the cycle count."""
    from agents.sim.fleet import Fleet

    tokens = tmp_path / "tokens.txt"
    tokens.write_text("t0\nt1")
    template = telemetry_template("h100x8")
    nodes = [SimNode.build(i, f"n{i}", "t", None, template, "1") for i in range(2)]
    base = ["--portal", "http://127.0.0.1:9", "--nodes", "2", "--tokens-file", str(tokens)]
    fleet = Fleet(parser_for_tests().parse_args(base), nodes)
    fleet._follow({"heartbeat_interval_s": 10, "long_poll_timeout_s": 30})
    assert (fleet.report_interval_s, fleet.long_poll_s) == (10, 30)
    fleet._follow({"status": "accepted", "heartbeat_interval_s": 200,
                   "long_poll_timeout_s": 100})
    assert (fleet.report_interval_s, fleet.long_poll_s) == (200, 100)
    fleet._schedule(nodes[1], after=fleet.epoch + 1_000.0)
    when, index = fleet.due[0]
    assert index == 1 and 1_000.0 < when - fleet.epoch <= 1_200.0 + 100.0
    fixed = Fleet(parser_for_tests().parse_args(
        [*base, "--report-interval", "5", "--long-poll", "20"]), nodes)
    fixed._follow({"heartbeat_interval_s": 200, "long_poll_timeout_s": 100})
    assert (fixed.report_interval_s, fixed.long_poll_s) == (5, 20)
