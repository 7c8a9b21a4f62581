"""Server CPU per report, in process: the agent API's report view on realistic bodies.

``python -m tests.bench.ingest_profile --nodes 50 --rounds 12 [--profile 30]``

Reports are built by the agent's own simulator code (``agents.sim.node``: one real sample of
the fake-NVML + fake-sysfs sampler, 8 GPUs and one HCA port, re-labelled per node), each
node 10 s apart in agent time, so one report in six starts a new minute of history. Each
request is built first (the agent's JSON encoding is not counted), then the view's own
code runs (``views.reports``: throttle, parse, validate, authenticate, ingest) and its CPU
time is measured with ``time.process_time`` (this process only: PostgreSQL's backend is
not counted, as the server's is in ``make bench-ingest``). ``--profile N`` prints the N
most expensive functions (cProfile, cumulative). PostgreSQL: ``DATABASE_URL`` (default
``postgres://postgres@127.0.0.1:5432/gpupool_bench_profile``, created and migrated).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import inspect
import io
import json
import os
import pstats
import statistics
import time
from typing import Any

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/gpupool_bench_profile"


def _setup(db: str) -> None:
    os.environ["DATABASE_URL"] = db
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ.setdefault("DEBUG", "0")
    from tests.bench.ingest import ensure_database

    ensure_database(db)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def _enrol(count: int, run: str) -> list[Any]:
    from agents.sim.node import SimNode, telemetry_template
    from portal.fleet.services.enrolment import agent_enrol, bootstrap_token_create

    template, nodes = telemetry_template(), []
    for i in range(count):
        host = f"prof-{run}-{i:04d}"
        _, token = bootstrap_token_create(actor=None, hostname=host)
        node = SimNode.build(int(run) * 1000 + i, host, token, None, template, "bench")
        done = agent_enrol(body={**node.enrol_request(), "machine_id": ""})
        node.node_id, node.credential = done.agent.agent_id, done.credential
        nodes.append(node)
    return nodes


def _request(node: Any, now: float) -> Any:
    from django.test import RequestFactory

    body = json.dumps(node.report(now))
    return RequestFactory().post(f"/api/agent/v1/nodes/{node.node_id}/reports", body,
                                 content_type="application/json",
                                 HTTP_AUTHORIZATION=f"Bearer {node.credential}")


def _asgi_run(nodes: list[Any], rounds: int, start: float,
              profiler: cProfile.Profile | None) -> list[float]:
    """``--through asgi``: each report through Django's ASGI handler (middleware, the agent
    API's database thread) in one event loop, as uvicorn hands it over (HTTP parsing and
    the socket not included)."""
    from django.test import AsyncClient

    async def main() -> list[float]:
        cpu: list[float] = []
        client = AsyncClient()
        for r in range(rounds):
            for node in nodes:
                body = json.dumps(node.report(start + 10.0 * r))
                path = f"/api/agent/v1/nodes/{node.node_id}/reports"
                auth = {"Authorization": f"Bearer {node.credential}"}
                if profiler is not None:
                    profiler.enable()
                t0 = time.process_time()  # every thread of this process
                resp = await client.post(path, body, content_type="application/json",
                                         headers=auth)
                cpu.append(time.process_time() - t0)
                if profiler is not None:
                    profiler.disable()
                assert resp.status_code == 200, resp.content[:300]
        return cpu

    return asyncio.run(main())


def _app_run(nodes: list[Any], rounds: int, start: float,
             profiler: cProfile.Profile | None) -> list[float]:
    """``--through app``: each report through the production ASGI application
    (``portal.asgi.application``: the path dispatch and the agent API's lean handler,
    ADR 0150) as uvicorn hands it over (HTTP parsing and the socket not included)."""
    from portal.asgi import application

    async def one(path: str, body: bytes, credential: str) -> int:
        """One request handed over as uvicorn hands it (one ``http.request`` message, then
        nothing until the response is sent), without a test harness's queues and tasks."""
        headers = [(b"host", b"localhost"), (b"content-type", b"application/json"),
                   (b"content-length", str(len(body)).encode()),
                   (b"authorization", f"Bearer {credential}".encode())]
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": "POST", "scheme": "http", "path": path,
                 "raw_path": path.encode(), "query_string": b"", "root_path": "",
                 "headers": headers, "client": ("127.0.0.1", 40000),
                 "server": ("localhost", 80)}
        pending = [{"type": "http.request", "body": body, "more_body": False}]
        never = asyncio.Event()
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            if pending:
                return pending.pop()
            await never.wait()  # the client stays connected
            raise AssertionError("unreachable")

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await application(scope, receive, send)
        return int(sent[0]["status"])

    async def main() -> list[float]:
        cpu: list[float] = []
        for r in range(rounds):
            for node in nodes:
                body = json.dumps(node.report(start + 10.0 * r)).encode()
                path = f"/api/agent/v1/nodes/{node.node_id}/reports"
                if profiler is not None:
                    profiler.enable()
                t0 = time.process_time()  # every thread of this process
                status = await one(path, body, node.credential)
                cpu.append(time.process_time() - t0)
                if profiler is not None:
                    profiler.disable()
                assert status == 200, status
        return cpu

    return asyncio.run(main())


def _run(nodes: list[Any], rounds: int, start: float, profiler: cProfile.Profile | None,
         through: str = "view") -> tuple[list[float], int]:
    if through == "asgi":
        return _asgi_run(nodes, rounds, start, profiler), 0
    if through == "app":
        return _app_run(nodes, rounds, start, profiler), 0
    from django.db import connection, reset_queries

    from portal.fleet.api import views

    view = inspect.unwrap(views.reports)  # the sync handler, without the ASGI thread hop
    cpu: list[float] = []
    queries = 0
    connection.force_debug_cursor = True
    for r in range(rounds):
        for node in nodes:
            request = _request(node, start + 10.0 * r)
            reset_queries()
            if profiler is not None:
                profiler.enable()
            t0 = time.process_time()
            resp = view(request, node.node_id)
            cpu.append(time.process_time() - t0)
            if profiler is not None:
                profiler.disable()
            queries += len(connection.queries)
            assert resp.status_code == 200, resp.content[:300]
    connection.force_debug_cursor = False
    return cpu, queries


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=50)
    p.add_argument("--rounds", type=int, default=12, help="reports per node (10 s apart)")
    p.add_argument("--warmup-rounds", type=int, default=2)
    p.add_argument("--profile", type=int, default=0, help="print the N costliest functions")
    p.add_argument("--through", choices=("view", "asgi", "app"), default="view",
                   help="view: the report view alone; asgi: Django's ASGI handler with the "
                        "full (browser) middleware too; app: portal.asgi.application, "
                        "the agent API's lean handler")
    o = p.parse_args(argv)
    _setup(os.environ.get("BENCH_PROFILE_DATABASE_URL", DEFAULT_DB))
    run = f"{int(time.time()) % 100000}"
    nodes = _enrol(o.nodes, run)
    start = time.time() - (o.rounds + o.warmup_rounds) * 10.0
    _run(nodes, o.warmup_rounds, start, None)  # first reports: rows created, caches warm
    profiler = cProfile.Profile(time.process_time) if o.profile else None
    cpu, queries = _run(nodes, o.rounds, start + o.warmup_rounds * 10.0, profiler, o.through)
    ms = sorted(c * 1000 for c in cpu)
    print(f"in-process report {o.through}, {o.nodes} nodes x {o.rounds} reports "
          "(8 GPUs, 1 port)")
    print(f"  {'reports':<24}{len(ms)}")
    print(f"  {'server CPU ms / report':<24}mean {statistics.fmean(ms):.2f}  "
          f"p50 {ms[len(ms) // 2]:.2f}  p90 {ms[int(len(ms) * 0.9)]:.2f}")
    counted = f"{queries / len(ms):.2f}" if o.through == "view" else \
        f"not counted ({o.through})"
    print(f"  {'queries / report':<24}{counted}")
    print(f"  {'load average':<24}{' '.join(open('/proc/loadavg').read().split()[:3])}")  # noqa: SIM115
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(o.profile)
        print(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
