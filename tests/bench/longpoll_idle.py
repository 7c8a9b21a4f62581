"""What idle agents cost the database: commits per agent per long-poll timeout.

``python -m tests.bench.longpoll_idle --nodes 100 --long-poll 10 --timeouts 3``

A live stack (tests/portal/leasing/stack.py: a fresh PostgreSQL database, a private Redis,
uvicorn) WITHOUT Celery workers or beat, so nothing but the agents touches the database;
the HTTP agent simulator (``agents.sim.fleet``: the agent's wire protocol) enrols ``--nodes``
agents, each reports (every ``--report-interval`` s) until all have, then its regular reports are paused (SIGUSR1) and only the long-polls run. Counted
by PostgreSQL itself: ``pg_stat_database.xact_commit`` of the stack's database over
``--timeouts`` whole long-poll timeouts (every autocommit statement is one commit), the
stack's own rate measured before any agent existed subtracted. Target: ≤ 1 per agent per
timeout (issue 12).
"""

from __future__ import annotations

import argparse
import os

from tests.bench.http_fleet import HttpFleet, commits_per_s
from tests.portal.leasing.stack import Stack, StackConfig

TARGET = 1.0


def _load() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])  # noqa: SIM115


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--long-poll", type=int, default=10, help="seconds per long-poll")
    p.add_argument("--timeouts", type=int, default=3, help="whole timeouts measured")
    p.add_argument("--report-interval", type=float, default=4.0,
                   help="seconds between reports until every agent has reported once")
    p.add_argument("--web-workers", type=int, default=2)
    p.add_argument("--baseline-s", type=float, default=10.0,
                   help="seconds of the stack alone measured first (0: skip)")
    o = p.parse_args(argv)
    config = StackConfig(nodes=o.nodes, tenants=1, workers=0, beat=False,
                         web_workers=o.web_workers,
                         env={"GPUPOOL_SIMULATED_AGENTS": "0",
                              "GPUPOOL_AGENT_UNREACHABLE_AFTER_S": "3600"})
    with Stack(config) as stack:
        baseline = commits_per_s(stack, o.baseline_s) if o.baseline_s > 0 else 0.0
        fleet = HttpFleet(stack, o.nodes, report_interval_s=o.report_interval, apply_delay_s=0.0,
                          long_poll_s=o.long_poll)
        fleet.start()
        fleet.wait_enrolled(timeout=max(300.0, o.nodes * 0.5))
        idle = fleet.idle_queries(o.timeouts, baseline)
        load = _load()
    per_agent = idle["net_per_agent_per_timeout"]
    rows = [
        ("agents", f"{o.nodes}"),
        ("web workers", f"{o.web_workers}"),
        ("long-poll timeout (s)", f"{idle['timeout_s']:.0f}"),
        ("window (s)", f"{idle['window_s']:.0f}"),
        ("stack alone (commits/s)", f"{baseline:.2f}"),
        ("commits in window", f"{idle['commits']}"),
        ("long-polls answered", f"{idle['long_polls']}"),
        ("reports in window", f"{idle['reports']}"),
        ("commits / agent / timeout", f"{per_agent:.2f}"),
        ("commits / long-poll", f"{idle['net_per_long_poll']:.2f}"),
        ("target", f"≤ {TARGET:g} per agent per timeout"),
        ("load average (1/5/15)", load),
        ("git", os.popen("git rev-parse --short HEAD 2>/dev/null").read().strip()),  # noqa: S605
    ]
    width = max(len(k) for k, _ in rows)
    print("idle long-poll cost (PostgreSQL pg_stat_database.xact_commit)")
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")
    ok = per_agent <= TARGET
    print(f"target: {'MET' if ok else 'NOT MET'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
