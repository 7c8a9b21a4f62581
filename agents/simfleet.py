"""Many node agents over HTTP in ONE asyncio process: the agent's wire protocol exactly.

Each identity enrols with its own hostname-bound bootstrap token, long-polls its desired
state, applies it after ``--apply-delay`` seconds (the agent's apply plus the subnet
manager setting the P_Keys), and reports at once with the generation echoed, as the real
agent's convergence watch does; between changes it reports every ``--report-interval``
seconds with telemetry shaped by the real sampler (fake NVML + fake sysfs, once, as a
template). What the portal sees is what it sees from ``python -m agents node``; only the
hardware is imaginary.

    python -m agents.simfleet --portal URL --tokens-file T [--inventory I] --nodes N

``--inventory``: JSON ``{hostname: {"ports": [[device, port, port_guid, node_guid]],
"gpus": [uuid, ...]}}`` (the identities the portal's inventory already holds); without
it hostnames are ``--hostname-prefix`` + index and GUIDs are derived from the index.
Prints JSON progress on stderr and a JSON summary on stdout (``--summary`` also to a file).
SIGUSR1 pauses (or resumes) the regular reports, to measure what idle long-polls cost
alone; SIGUSR2 writes the summary so far to ``--summary``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from agents import __version__, protocol
from agents.simnode import SimNode, telemetry_template

SHARDS = 64  # clients (connection pools): httpcore scans its pool on every request


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--portal", required=True, help="portal base URL")
    p.add_argument("--nodes", type=int, default=10)
    p.add_argument("--tokens-file", type=Path, required=True,
                   help="one one-time bootstrap token per line, one per node")
    p.add_argument("--inventory", type=Path, help="hostname -> ports/GPUs (JSON)")
    p.add_argument("--hostname-prefix", default="sim-node-")
    p.add_argument("--gpus", default="h100x8")
    p.add_argument("--report-interval", type=float, default=10.0)
    p.add_argument("--long-poll", type=int, default=0,
                   help="seconds per long-poll; 0: what the portal said at enrolment")
    p.add_argument("--apply-delay", type=float, default=0.1,
                   help="seconds from receiving desired state to converged (apply + SM)")
    p.add_argument("--enrol-concurrency", type=int, default=16)
    p.add_argument("--duration", type=float, default=0.0, help="seconds; 0 = until SIGTERM")
    p.add_argument("--summary", type=Path, help="also write the summary JSON here")
    p.add_argument("--seed", type=int, default=1)


class Fleet:
    def __init__(self, args: argparse.Namespace, nodes: list[SimNode]) -> None:
        self.args, self.nodes = args, nodes
        per = max(4, 3 * len(nodes) // SHARDS + 4)
        limits = httpx.Limits(max_connections=per, max_keepalive_connections=per)
        timeout = httpx.Timeout(30.0, connect=30.0, pool=None)
        self.clients = [httpx.AsyncClient(base_url=args.portal.rstrip("/"), limits=limits,
                                          timeout=timeout) for _ in range(SHARDS)]
        self.stop = asyncio.Event()
        self.counts: dict[str, int] = {}
        self.errors: dict[str, int] = {}
        self.report_s: list[float] = []
        self.long_poll_s = args.long_poll
        self.paused = False
        self.started = time.monotonic()

    def client(self, node: SimNode) -> httpx.AsyncClient:
        return self.clients[node.index % SHARDS]

    def count(self, key: str) -> None:
        self.counts[key] = self.counts.get(key, 0) + 1

    async def call(self, node: SimNode, method: str, path: str, body: Any = None,
                   params: dict[str, Any] | None = None,
                   timeout: float | None = None) -> httpx.Response | None:  # fmt: skip
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if node.credential:
            headers[protocol.AUTH_HEADER] = f"Bearer {node.credential}"
        content = None if body is None else json.dumps(body, separators=(",", ":"))
        try:
            resp = await self.client(node).request(
                method, path, content=content, params=params, headers=headers,
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT)
        except httpx.HTTPError as exc:
            self.errors[type(exc).__name__] = self.errors.get(type(exc).__name__, 0) + 1
            return None
        if resp.status_code >= 400:
            key = f"{method} {resp.status_code}"
            self.errors[key] = self.errors.get(key, 0) + 1
            return None
        return resp

    # --- one identity --------------------------------------------------------------------
    async def enrol(self, node: SimNode, gate: asyncio.Semaphore) -> None:
        delay = 1.0
        while not self.stop.is_set():
            async with gate:
                resp = await self.call(node, "POST", protocol.ENROL_PATH, node.enrol_request())
            if resp is not None:
                data = resp.json()
                node.node_id, node.credential = data["node_id"], data["credential"]
                if not self.long_poll_s:
                    self.long_poll_s = int(data.get("long_poll_timeout_s") or 30)
                self.count("enrolled")
                return
            await self._sleep(delay)
            delay = min(delay * 2, 30.0)

    async def report(self, node: SimNode) -> None:
        async with node.lock:  # one at a time per node, in seq order (as the spool sends)
            body = node.report(time.time())
            t0 = time.perf_counter()
            resp = await self.call(node, "POST", protocol.REPORTS_PATH.format(
                node_id=node.node_id), body)
            self.report_s.append(time.perf_counter() - t0)
            self.count("reports" if resp is not None else "reports_failed")

    async def heartbeat(self, node: SimNode) -> None:
        rng = random.Random(self.args.seed * 7919 + node.index)
        await self._sleep(rng.uniform(0, self.args.report_interval))  # hosts boot apart
        while not self.stop.is_set():
            if not self.paused:
                await self.report(node)
            await self._sleep(self.args.report_interval)

    async def long_poll(self, node: SimNode) -> None:
        delay = 1.0
        while not self.stop.is_set():
            path = protocol.DESIRED_STATE_PATH.format(node_id=node.node_id)
            params = {"after_generation": node.generation_seen, "wait": self.long_poll_s}
            resp = await self.call(node, "GET", path, params=params,
                                   timeout=self.long_poll_s + 10.0)
            self.count("long_polls")
            if resp is None:
                await self._sleep(delay)
                delay = min(delay * 2, 60.0)
                continue
            delay = 1.0
            if resp.status_code == 204:
                continue
            desired = resp.json()
            if protocol.validate_desired_state(desired, "node"):
                self.count("invalid_desired")
                await self._sleep(1.0)
                continue
            node.generation_seen = max(node.generation_seen, int(desired["generation"]))
            await asyncio.sleep(self.args.apply_delay)  # apply, then the SM sets the keys
            node.apply(desired)
            self.count("applied")
            await self.report(node)  # converged: reported now, not at the next heartbeat

    async def run_node(self, node: SimNode, gate: asyncio.Semaphore) -> None:
        await self.enrol(node, gate)
        if not self.stop.is_set():
            await asyncio.gather(self.heartbeat(node), self.long_poll(node))

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), seconds)

    def summary(self, elapsed: float) -> dict[str, Any]:
        lat = sorted(self.report_s)

        def pct(q: float) -> float:
            return round(lat[min(len(lat) - 1, int(q * len(lat)))] * 1000, 1) if lat else 0.0

        return {"nodes": len(self.nodes), "elapsed_s": round(elapsed, 1),
                "long_poll_s": self.long_poll_s, **self.counts, "errors": self.errors,
                "report_p50_ms": pct(0.5), "report_p99_ms": pct(0.99)}

    def toggle_pause(self) -> None:
        self.paused = not self.paused
        self.dump()

    def dump(self) -> None:
        if self.args.summary:
            summary = {**self.summary(time.monotonic() - self.started), "paused": self.paused}
            self.args.summary.write_text(json.dumps(summary))

    async def progress(self, started: float) -> None:
        while not self.stop.is_set():
            await self._sleep(10.0)
            print(json.dumps({"progress": self.summary(time.monotonic() - started)}),
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
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, fleet.stop.set)
    loop.add_signal_handler(signal.SIGUSR1, fleet.toggle_pause)
    loop.add_signal_handler(signal.SIGUSR2, fleet.dump)
    started = time.monotonic()
    gate = asyncio.Semaphore(args.enrol_concurrency)
    tasks = [asyncio.create_task(fleet.run_node(n, gate)) for n in nodes]
    tasks.append(asyncio.create_task(fleet.progress(started)))
    if args.duration:
        loop.call_later(args.duration, fleet.stop.set)
    await fleet.stop.wait()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for c in fleet.clients:
        await c.aclose()
    return fleet.summary(time.monotonic() - started)


def parser_for_tests() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="simfleet")
    add_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m agents.simfleet", description=__doc__,
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
