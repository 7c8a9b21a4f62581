"""The HTTP agent simulator (``python -m agents.sim.fleet``) attached to a live ``Stack``.

It enrols every inventory node over the agent API with its own hostname-bound one-time
bootstrap token (issued by ``manage.py agent_token create``, as an operator does), then
long-polls and reports like the real agent. ``idle_queries`` measures what an idle fleet
costs the database: regular reports paused (SIGUSR1), PostgreSQL's committed transactions
(``pg_stat_database.xact_commit``: every autocommit statement is one) over whole long-poll
timeouts, per agent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.portal.leasing.stack import PYTHON, ROOT, Stack

# PostgreSQL (15+) counts a backend's commits in pg_stat_database when it flushes its
# pending statistics: after a commit at most once a second, and for a backend that went
# idle after an idle timeout of 10 s. A window opened less than that after busy traffic
# counts some of that traffic: 3 s after 200 agents' reports stopped, ≈ 250 commits landed
# in a 30 s window whose only statements were its 600 long-poll reads (log_statement=all,
# log_min_duration_statement=0); 12 s after, 607.
STATS_SETTLE_S = 12.0


def commits_per_s(stack: Stack, seconds: float) -> float:
    """Committed transactions per second in the stack's database (our two excluded),
    counted once the statistics of what ran before have landed."""
    sql = "SELECT xact_commit FROM pg_stat_database WHERE datname = %s"
    time.sleep(STATS_SETTLE_S)
    with stack.connect() as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        c0 = conn.execute(sql, [stack.db_name]).fetchone()[0]
        time.sleep(seconds)
        conn.execute("SELECT pg_stat_clear_snapshot()")
        c1 = conn.execute(sql, [stack.db_name]).fetchone()[0]
    return float(c1 - c0 - 2) / seconds


def write_inventory(stack: Stack, path: Path) -> int:
    """hostname -> the ports and GPU UUIDs the portal's inventory holds (agent identities)."""
    inv: dict[str, dict[str, list[Any]]] = {}
    for host, device, port, guid, node_guid in stack.query(
            """SELECT n.hostname, p.device, p.port_number, p.port_guid, p.node_guid
               FROM inventory_node n JOIN inventory_hcaport p ON p.node_id = n.id
               ORDER BY n.hostname, p.device, p.port_number"""):
        inv.setdefault(host, {"ports": [], "gpus": []})["ports"].append(
            [device, port, guid, node_guid])
    for host, uuid in stack.query("""SELECT n.hostname, g.uuid FROM inventory_gpu g
                                     JOIN inventory_node n ON n.id = g.node_id
                                     ORDER BY n.hostname, g.index"""):
        inv.setdefault(host, {"ports": [], "gpus": []})["gpus"].append(uuid)
    path.write_text(json.dumps(inv))
    return len(inv)


def issue_tokens(stack: Stack, path: Path, count: int, pattern: str = "node-*") -> None:
    out = subprocess.run([PYTHON, "-m", "django", "agent_token", "create", "--role", "node",
                          "--hostname", pattern, "--count", str(count)], cwd=ROOT,
                         env=stack.env(), capture_output=True, text=True, timeout=1800,
                         check=True)
    path.write_text(out.stdout)


@dataclass
class HttpFleet:
    stack: Stack
    nodes: int
    report_interval_s: float
    apply_delay_s: float
    long_poll_s: int = 0  # 0: the timeout the portal gives at enrolment
    proc: subprocess.Popen[bytes] | None = None
    control: Path | None = None  # faults injected while running (agents.sim.faults)

    @property
    def summary_path(self) -> Path:
        return self.stack.tmp / "simfleet-summary.json"

    def start(self) -> float:
        began = time.perf_counter()
        inventory, tokens = self.stack.tmp / "inventory.json", self.stack.tmp / "tokens.txt"
        write_inventory(self.stack, inventory)
        issue_tokens(self.stack, tokens, self.nodes)
        argv = [PYTHON, "-m", "agents.sim.fleet", "--portal", self.stack.base_url,
                "--nodes", str(self.nodes), "--tokens-file", str(tokens),
                "--inventory", str(inventory), "--report-interval", str(self.report_interval_s),
                "--apply-delay", str(self.apply_delay_s), "--long-poll", str(self.long_poll_s),
                "--summary", str(self.summary_path)]
        if self.control is not None:
            self.control.touch()
            argv += ["--control", str(self.control)]
        self.proc = self.stack._spawn("simfleet", argv, {**self.stack.env(),
                                                          "PYTHONPATH": str(ROOT)})
        return time.perf_counter() - began

    def wait_enrolled(self, timeout: float) -> float:
        """Until every node has enrolled and its observed state is stored."""
        began = time.perf_counter()
        deadline, shown = time.monotonic() + timeout, time.monotonic()
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"simulator exited\n{self.stack.log_tail('simfleet')}")
            done = self.stack.query("SELECT count(*) FROM fleet_nodeobservedstate")[0][0]
            if done >= self.nodes:
                return time.perf_counter() - began
            if time.monotonic() - shown >= 60:
                shown = time.monotonic()
                print(f"  … {done} of {self.nodes} enrolled and reporting after "
                      f"{time.perf_counter() - began:.0f} s; load {os.getloadavg()[0]:.1f}",
                      flush=True)
            time.sleep(1.0)
        raise RuntimeError(f"not all nodes enrolled\n{self.stack.log_tail('simfleet', 5)}")

    def counts(self) -> dict[str, Any]:
        assert self.proc is not None
        before = self.summary_path.stat().st_mtime_ns if self.summary_path.exists() else 0
        os.kill(self.proc.pid, signal.SIGUSR2)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.summary_path.exists() and self.summary_path.stat().st_mtime_ns != before:
                try:
                    return dict(json.loads(self.summary_path.read_text()))
                except ValueError:
                    pass
            time.sleep(0.05)
        return {}

    def mark(self) -> None:
        """Start the simulator's measurement window (its ``latency_window``)."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGHUP)

    def pause_reports(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGUSR1)

    def idle_queries(self, timeouts: int = 2, baseline_per_s: float = 0.0) -> dict[str, float]:
        """Reports paused; committed transactions per agent per long-poll timeout, all of
        them and net of ``baseline_per_s`` (the stack's own, measured before any agent)."""
        self.pause_reports()
        first = self.counts()
        timeout_s = float(first.get("long_poll_s") or 30)
        time.sleep(STATS_SETTLE_S)  # in-flight reports drain, their statistics land
        sql = "SELECT xact_commit FROM pg_stat_database WHERE datname = %s"
        with self.stack.connect() as conn:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            c0, p0 = conn.execute(sql, [self.stack.db_name]).fetchone()[0], self.counts()
            time.sleep(timeout_s * timeouts)
            conn.execute("SELECT pg_stat_clear_snapshot()")
            c1, p1 = conn.execute(sql, [self.stack.db_name]).fetchone()[0], self.counts()
        commits = c1 - c0 - 2  # our own two statements
        net = commits - baseline_per_s * timeout_s * timeouts
        polls = p1.get("long_polls", 0) - p0.get("long_polls", 0)
        reports = p1.get("reports", 0) - p0.get("reports", 0)
        return {"window_s": timeout_s * timeouts, "timeout_s": timeout_s, "commits": commits,
                "net": net, "long_polls": polls, "reports": reports,
                "per_agent_per_timeout": commits / self.nodes / timeouts,
                "net_per_agent_per_timeout": net / self.nodes / timeouts,
                "net_per_long_poll": net / polls if polls else 0.0}
