"""Many node agents over HTTP in ONE asyncio process: the agent's wire protocol exactly.

Each identity enrols with its own hostname-bound bootstrap token, long-polls its desired
state, applies it after ``--apply-delay`` seconds (the agent's apply plus the subnet
manager setting the P_Keys), and reports at once with the generation echoed, as the real
agent's convergence watch does; between changes it reports every ``--report-interval``
seconds with telemetry shaped by the real sampler (fake NVML + fake sysfs, once, as a
template). What the portal sees is what it sees from ``python -m agents node``; only the
hardware is imaginary.

    python -m agents.sim.fleet --portal URL --tokens-file T [--inventory I] --nodes N

``--inventory``: JSON ``{hostname: {"ports": [[device, port, port_guid, node_guid]],
"gpus": [uuid, ...]}}`` (the identities the portal's inventory already holds); without
it hostnames are ``--hostname-prefix`` + index and GUIDs are derived from the index.
Prints JSON progress on stderr and a JSON summary on stdout (``--summary`` also to a file).
``--control PATH``: a JSON-lines file of faults to inject while running (``agents.sim.faults``:
XIDs, ECC, row remaps, ports down, silent agents, clear); a node reports right after a
fault is applied; the summary counts ``faults_applied``.
SIGUSR1 pauses (or resumes) the regular reports, to measure what idle long-polls cost
alone; SIGUSR2 writes the summary so far to ``--summary``; SIGHUP starts a measurement
window (the summary's ``latency_window``: per endpoint, only what came after it).
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import math
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

from agents import __version__, protocol
from agents.sim.faults import ControlFile, unless_silenced
from agents.sim.httppool import HttpError, Pool, Response
from agents.sim.node import SimNode, telemetry_template
from agents.sim.stats import Stats

MIN_REPORT_INTERVAL_S = 10
URGENT = ("converged_reports", "fault_reports")  # sent because something changed
ENROL_TIMEOUT_S = 120.0  # an enrolment answered late is still an enrolment: do not resend


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--portal", required=True, help="portal base URL (http://)")
    p.add_argument("--nodes", type=int, default=10)
    p.add_argument("--tokens-file", type=Path, required=True,
                   help="one one-time bootstrap token per line, one per node")
    p.add_argument("--inventory", type=Path, help="hostname -> ports/GPUs (JSON)")
    p.add_argument("--hostname-prefix", default="sim-node-")
    p.add_argument("--gpus", default="h100x8")
    p.add_argument("--report-interval", type=float, default=0.0,
                   help="seconds between regular reports; 0: what the portal said at "
                        "enrolment (heartbeat_interval_s)")
    p.add_argument("--jitter", type=float, default=0.5,
                   help="each report moves up to ± this fraction of its slot (the interval "
                        "/ nodes) so that reports never line up")
    p.add_argument("--long-poll", type=int, default=0,
                   help="seconds per long-poll; 0: what the portal said at enrolment")
    p.add_argument("--apply-delay", type=float, default=0.1,
                   help="seconds from receiving desired state to converged (apply + SM)")
    p.add_argument("--enrol-concurrency", type=int, default=16)
    p.add_argument("--connections", type=int, default=0,
                   help="HTTP connections at most (0: nodes + enrol concurrency + 64: one "
                        "long-poll each and room for reports)")
    p.add_argument("--duration", type=float, default=0.0, help="seconds; 0 = until SIGTERM")
    p.add_argument("--summary", type=Path, help="also write the summary JSON here")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--control", type=Path,
                   help="JSON-lines fault control file, re-read every loop (agents.sim.faults)")


class Fleet:
    """N identities over ONE connection pool. Per identity: one task that long-polls (it
    sleeps in a socket read); the regular reports of all of them come from ONE scheduler
    task, each node in its own slot of the interval (evenly spread, jittered)."""

    def __init__(self, args: argparse.Namespace, nodes: list[SimNode]) -> None:
        self.args, self.nodes = args, nodes
        limit = args.connections or len(nodes) + args.enrol_concurrency + 64
        self.pool = Pool(args.portal, limit=limit)
        self.stats = Stats()
        self.long_poll_s = int(args.long_poll)
        self.report_interval_s = float(args.report_interval)
        self.paused = False
        self.started = time.monotonic()
        self.rng = random.Random(args.seed)
        self.due: list[tuple[float, int]] = []  # (when, node index)
        self.epoch = time.monotonic()
        self.tasks: set[asyncio.Task[None]] = set()
        self.interval_known = asyncio.Event()
        self.control = ControlFile(args.control, {n.hostname: n for n in nodes}) \
            if args.control else None

    async def call(self, node: SimNode, method: str, path: str, endpoint: str,
                   body: Any = None, params: dict[str, Any] | None = None,
                   timeout: float = 30.0, urgent: bool = False) -> Response | None:  # fmt: skip
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if node.credential:
            headers[protocol.AUTH_HEADER] = f"Bearer {node.credential}"
        if urgent:  # as the agent marks the report it sends because its node converged
            headers[protocol.PRIORITY_HEADER] = protocol.URGENT_PRIORITY
        content = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        t0 = time.perf_counter()
        try:
            resp = await self.pool.request(method, path, body=content, params=params,
                                           headers=headers, timeout=timeout)
        except HttpError as exc:
            self.stats.error(endpoint, str(exc).split(":")[0])
            return None
        self.stats.took(endpoint, time.perf_counter() - t0)
        if resp.status_code >= 400:
            self.stats.error(endpoint, str(resp.status_code))
            return None
        return resp

    # --- one identity --------------------------------------------------------------------
    async def enrol(self, node: SimNode, gate: asyncio.Semaphore) -> None:
        delay = 1.0
        while True:
            async with gate:
                resp = await self.call(node, "POST", protocol.ENROL_PATH, "enrol",
                                       node.enrol_request(), timeout=ENROL_TIMEOUT_S)
            if resp is not None:
                self._enrolled(node, json.loads(resp.content))
                return
            await asyncio.sleep(delay * self.rng.uniform(0.5, 1.5))
            delay = min(delay * 2, 30.0)

    def _enrolled(self, node: SimNode, data: dict[str, Any]) -> None:
        node.node_id, node.credential = data["node_id"], data["credential"]
        self._follow(data)
        self.interval_known.set()
        self.stats.count("enrolled")
        self._schedule(node, after=time.monotonic())

    def _follow(self, answer: dict[str, Any]) -> None:
        """Take the intervals an enrolment answer or a report ack carries, as the agent
        does (``PortalClient._follow``), unless the command line fixed them."""
        said = protocol.interval_advice(answer)
        if not self.args.long_poll and said.long_poll_s:
            self.long_poll_s = said.long_poll_s
        if not self.args.report_interval and said.heartbeat_s:
            self.report_interval_s = float(max(said.heartbeat_s, MIN_REPORT_INTERVAL_S))
        self.long_poll_s = self.long_poll_s or 30
        self.report_interval_s = self.report_interval_s or float(MIN_REPORT_INTERVAL_S)

    def _offset(self, node: SimNode, jitter: float) -> float:
        slot = self.report_interval_s / max(1, len(self.nodes))
        return (node.index + 0.5 + jitter) * slot

    def _schedule(self, node: SimNode, after: float, done: bool = False) -> None:
        """``node``'s next slot of the (current) interval after ``after``, jittered;
        ``done``: ``after`` was one of its (jittered) slots, so take the one after it."""
        j = self.rng.uniform(-self.args.jitter, self.args.jitter)
        interval = self.report_interval_s
        cycles = (after - self.epoch - self._offset(node, 0.0)) / interval
        cycle = (round(cycles) if done else math.floor(cycles)) + 1
        when = self.epoch + cycle * interval + self._offset(node, j)
        heapq.heappush(self.due, (when, node.index))

    async def report(self, node: SimNode, why: str = "reports") -> None:
        if node.faults.silent or not node.node_id:  # a dead agent sends nothing
            return
        async with node.lock:  # one at a time per node, in seq order (as the spool sends)
            body = node.report(time.time())
            resp = await self.call(node, "POST", protocol.REPORTS_PATH.format(
                node_id=node.node_id), "report", body, urgent=why in URGENT)
            self.stats.count(why if resp is not None else f"{why}_failed")
            if resp is not None:
                self._follow(json.loads(resp.content))

    async def long_poll(self, node: SimNode) -> None:
        delay = 1.0
        while True:
            path = protocol.DESIRED_STATE_PATH.format(node_id=node.node_id)
            wait = self.long_poll_s
            params = {"after_generation": node.generation_seen, "wait": wait}
            await node.faults.awake.wait()  # a silenced agent does not long-poll
            t0 = time.perf_counter()
            poll = self.call(node, "GET", path, "long_poll", params=params,
                             timeout=wait + 10.0)
            resp = await (unless_silenced(node.faults, poll) if self.control else poll)
            if node.faults.silent:
                continue
            self.stats.count("long_polls")
            if resp is None:
                await asyncio.sleep(delay * self.rng.uniform(0.5, 1.5))
                delay = min(delay * 2, 60.0)
                continue
            delay = 1.0
            if resp.status_code == 204:
                self.stats.took("long_poll_late", max(0.0, time.perf_counter() - t0 - wait))
                continue
            await self._apply(node, json.loads(resp.content))

    async def follow_control(self) -> None:
        """Apply the control file's new lines each loop; a changed node reports now."""
        assert self.control is not None
        while True:
            for node in self.control.poll():
                self._spawn(self.report(node, "fault_reports"))
            await asyncio.sleep(0.05)

    async def _apply(self, node: SimNode, desired: dict[str, Any]) -> None:
        if protocol.validate_desired_state(desired, "node"):
            self.stats.count("invalid_desired")
            await asyncio.sleep(1.0)
            return
        node.generation_seen = max(node.generation_seen, int(desired["generation"]))
        await asyncio.sleep(self.args.apply_delay)  # apply, then the SM sets the keys
        node.apply(desired)
        self.stats.count("applied")
        await self.report(node, "converged_reports")  # now, not at the next heartbeat

    async def run_node(self, node: SimNode, gate: asyncio.Semaphore) -> None:
        await self.enrol(node, gate)
        self._spawn(self.report(node))  # the agent reports once at once, as it starts
        await self.long_poll(node)

    # --- the one scheduler of regular reports ---------------------------------------------
    async def heartbeats(self) -> None:
        await self.interval_known.wait()
        while True:
            now = time.monotonic()
            while self.due and self.due[0][0] <= now:
                when, index = heapq.heappop(self.due)
                node = self.nodes[index]
                if not self.paused and not node.lock.locked():
                    self._spawn(self.report(node))
                self._schedule(node, after=when, done=True)
            wait = self.due[0][0] - now if self.due else 0.1
            await asyncio.sleep(min(max(wait, 0.0), 0.1))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def summary(self, elapsed: float) -> dict[str, Any]:
        return {"nodes": len(self.nodes), "elapsed_s": round(elapsed, 1),
                "long_poll_s": self.long_poll_s, "report_interval_s": self.report_interval_s,
                "connections_opened": self.pool.opened, **self.stats.summary(),
                **({"faults_applied": self.control.applied,
                    "faults_skipped": self.control.skipped} if self.control else {})}

    def toggle_pause(self) -> None:
        self.paused = not self.paused
        self.dump()

    def dump(self) -> None:
        if self.args.summary:
            summary = {**self.summary(time.monotonic() - self.started), "paused": self.paused}
            self.args.summary.write_text(json.dumps(summary))

    async def progress(self) -> None:
        while True:
            await asyncio.sleep(10.0)
            print(json.dumps({"progress": self.summary(time.monotonic() - self.started)}),
                  file=sys.stderr, flush=True)


def build_nodes(args: argparse.Namespace) -> list[SimNode]:
    tokens = args.tokens_file.read_text().split()
    if len(tokens) < args.nodes:
        raise SystemExit(f"--tokens-file has {len(tokens)} tokens for {args.nodes} nodes")
    inventory: dict[str, Any] = json.loads(args.inventory.read_text()) if args.inventory \
        else {}
    names = sorted(inventory)[: args.nodes] if inventory else [
        f"{args.hostname_prefix}{i:05d}" for i in range(1, args.nodes + 1)]
    template = telemetry_template(args.gpus)
    return [SimNode.build(i, name, tokens[i], inventory.get(name), template, __version__)
            for i, name in enumerate(names)]


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    nodes = build_nodes(args)
    fleet = Fleet(args, nodes)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, fleet.toggle_pause)
    loop.add_signal_handler(signal.SIGUSR2, fleet.dump)
    loop.add_signal_handler(signal.SIGHUP, fleet.stats.mark)
    gate = asyncio.Semaphore(args.enrol_concurrency)
    tasks = [asyncio.create_task(fleet.run_node(n, gate)) for n in nodes]
    tasks += [asyncio.create_task(fleet.heartbeats()), asyncio.create_task(fleet.progress())]
    if fleet.control is not None:
        tasks.append(asyncio.create_task(fleet.follow_control()))
    if args.duration:
        loop.call_later(args.duration, stop.set)
    await stop.wait()
    for t in [*tasks, *fleet.tasks]:
        t.cancel()
    await asyncio.gather(*tasks, *fleet.tasks, return_exceptions=True)
    await fleet.pool.aclose()
    return fleet.summary(time.monotonic() - fleet.started)


def parser_for_tests() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="simfleet")
    add_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m agents.sim.fleet", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    args = p.parse_args(argv)
    result = asyncio.run(amain(args))
    text = json.dumps(result)
    print(text, flush=True)
    if args.summary:
        args.summary.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
