"""Many simulated node agents in one process (fake NVML + fake sysfs/procfs each) against a
portal URL, for load tests and the demo.

``python -m agents simulate --portal URL --nodes N --bootstrap-token T [--gpus h100x8]
[--interval 10] [--duration 300] [--workers 32] [--state-dir DIR]``

The same agent code as production runs per node (enrolment, spool, backoff, reports,
desired-state apply with fake access/IPoIB). One scheduler thread hands due agents to a
thread pool. Prints JSON progress lines on stderr and a JSON summary on stdout.

It does not long-poll; for order → active over the agent protocol at 1,000–10,000
identities use ``python -m agents.sim.fleet`` (one asyncio process; ADR 0114).
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from agents.client.backoff import Backoff
from agents.client.fakeportal import FakePortal
from agents.client.portal import PortalClient
from agents.host import HostCollector, write_fake_proc
from agents.node.access import FakeAccess
from agents.node.agent import AgentSettings, NodeAgent
from agents.node.apply import NodeApplier
from agents.node.ipoib import FakeIpoib
from agents.nvml.collector import NvmlCollector
from agents.nvml.fake import FakeNvml
from agents.sysfs.faketree import FakeSysfsWriter, gpu_node_hcas
from agents.sysfs.infiniband import InfinibandCollector
from agents.telemetry import Sampler


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--portal", required=True,
                   help="portal base URL, or 'fake:' for an in-process fake portal")
    p.add_argument("--nodes", type=int, default=10)
    p.add_argument("--bootstrap-token", default="",
                   help="enrolment token used by every node (issue it with >= N uses)")
    p.add_argument("--bootstrap-tokens-file", type=Path,
                   help="one one-time token per line, one per node")
    p.add_argument("--gpus", default="h100x8", help="fake GPUs per node, e.g. h100x8")
    p.add_argument("--hcas", type=int, default=1, help="HCAs per node")
    p.add_argument("--interval", type=float, default=10.0, help="sample/report interval (s)")
    p.add_argument("--duration", type=float, default=0.0, help="seconds; 0 = until SIGTERM")
    p.add_argument("--workers", type=int, default=32)
    p.add_argument("--hostname-prefix", default="sim-node-")
    p.add_argument("--state-dir", type=Path, default=None)
    p.add_argument("--seed", type=int, default=1)


@dataclass
class SimNode:
    agent: NodeAgent
    api: FakeNvml
    writer: FakeSysfsWriter
    rng: random.Random
    latencies: list[float] = field(default_factory=list)

    def step(self, now: float, interval: float) -> float:
        if now >= self.agent.next_sample:  # the hardware moves between samples
            self.api.tick(interval)
            for name in self.writer.hcas:
                r = self.rng.randint
                self.writer.bump(name, 1, port_xmit_data=r(0, 10**9), port_rcv_data=r(0, 10**9),
                                 port_xmit_packets=r(0, 10**6), port_rcv_packets=r(0, 10**6))
        return self.agent.tick()


def build_node(index: int, args: argparse.Namespace, root: Path, token: str | None,
               transport: httpx.BaseTransport | None = None) -> SimNode:  # fmt: skip
    hostname = f"{args.hostname_prefix}{index:04d}"
    base = root / hostname
    writer = FakeSysfsWriter(base / "sys", pkey_table_size=16)
    for hca in gpu_node_hcas(index, args.hcas):
        hca.node_desc = f"{hostname} {hca.name}"
        writer.add(hca)
    write_fake_proc(base / "proc", hostname)
    api = FakeNvml(args.gpus, host=hostname, seed=args.seed + index)
    api.nvmlInit()
    ib = InfinibandCollector(base / "sys")
    sampler = Sampler(HostCollector(base / "proc"), ib, NvmlCollector(api))
    client = PortalClient("http://fake.portal" if transport else args.portal, transport=transport)
    rng = random.Random(args.seed * 100_003 + index)
    settings = AgentSettings(state_dir=base / "state", bootstrap_token=token,
                             sample_interval_s=args.interval, report_interval_s=args.interval,
                             fsync=False)  # fmt: skip
    agent = NodeAgent(settings, client, sampler, NodeApplier(ib, FakeAccess(), FakeIpoib()),
                      backoff=Backoff(1, 60, rng))  # fmt: skip
    # spread the fleet over one interval, like real hosts booted at different times
    agent.next_sample = agent.next_report = agent.next_send = time.monotonic() + rng.uniform(
        0, args.interval)
    node = SimNode(agent, api, writer, rng)
    send = client.send_report

    def timed(report: dict[str, Any], urgent: bool = False) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            return send(report, urgent)
        finally:
            node.latencies.append(time.perf_counter() - started)

    client.send_report = timed  # type: ignore[method-assign]
    return node


def _tokens(args: argparse.Namespace) -> list[str | None]:
    if args.bootstrap_tokens_file:
        lines = args.bootstrap_tokens_file.read_text().split()
        return [lines[i] if i < len(lines) else None for i in range(args.nodes)]
    return [args.bootstrap_token or None] * args.nodes


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(nodes: list[SimNode], elapsed: float) -> dict[str, Any]:
    lat = [x for n in nodes for x in n.latencies]
    sent = sum(n.agent.sent for n in nodes)
    return {
        "nodes": len(nodes), "enrolled": sum(n.agent.enrolled() for n in nodes),
        "elapsed_s": round(elapsed, 1), "reports_sent": sent,
        "reports_per_s": round(sent / elapsed, 1) if elapsed else 0.0,
        "rejected": sum(n.agent.rejected for n in nodes),
        "spooled": sum(len(n.agent.spool) for n in nodes),
        "dropped": sum(n.agent.spool.dropped for n in nodes),
        "latency_p50_ms": round(_pct(lat, 0.50) * 1000, 1),
        "latency_p99_ms": round(_pct(lat, 0.99) * 1000, 1),
    }  # fmt: skip


def run(args: argparse.Namespace, stop: threading.Event | None = None) -> int:
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
    tmp = None
    if args.state_dir is None:
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None  # noqa: S108 (RAM: faster)
        tmp = tempfile.TemporaryDirectory(prefix="gpupool-sim-", dir=shm)
        args.state_dir = Path(tmp.name)
    transport = None
    if args.portal == "fake:":
        fake = FakePortal()
        args.bootstrap_token = fake.issue_bootstrap_token(uses=args.nodes)
        transport = fake.transport()
    tokens = _tokens(args)
    nodes = [build_node(i + 1, args, args.state_dir, tokens[i], transport)
             for i in range(args.nodes)]  # fmt: skip
    started = time.monotonic()
    try:
        _loop(nodes, args, stop, started)
    finally:
        for n in nodes:
            n.agent.client.close()
        print(json.dumps(summary(nodes, time.monotonic() - started)), flush=True)
        if tmp is not None:
            tmp.cleanup()
    return 0


def _loop(nodes: list[SimNode], args: argparse.Namespace, stop: threading.Event,
          started: float) -> None:  # fmt: skip
    due: list[tuple[float, int]] = [(n.agent.next_sample, i) for i, n in enumerate(nodes)]
    heapq.heapify(due)
    ready: list[tuple[float, int]] = []
    lock = threading.Lock()
    busy: set[int] = set()
    next_progress = started + 10

    def work(i: int) -> None:
        try:
            delay = nodes[i].step(time.monotonic(), args.interval)
        except Exception as exc:  # a broken node must not stop the simulation
            print(json.dumps({"node": i, "error": repr(exc)}), file=sys.stderr)
            delay = args.interval
        with lock:
            busy.discard(i)
            ready.append((time.monotonic() + max(delay, 0.05), i))

    with ThreadPoolExecutor(max_workers=args.workers) as pool:
        while not stop.is_set():
            now = time.monotonic()
            if args.duration and now - started >= args.duration:
                break
            with lock:
                for item in ready:
                    heapq.heappush(due, item)
                ready.clear()
            while due and due[0][0] <= now:
                _, i = heapq.heappop(due)
                with lock:
                    busy.add(i)
                pool.submit(work, i)
            if now >= next_progress:
                print(json.dumps({"progress": summary(nodes, now - started)}), file=sys.stderr)
                next_progress = now + 10
            wait = (due[0][0] - now) if due else 0.05
            stop.wait(min(max(wait, 0.005), 0.2))


def parser_for_tests() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="simulate")
    add_arguments(p)
    return p
