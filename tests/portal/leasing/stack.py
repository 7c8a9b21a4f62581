"""A live gpupool stack for acceptance tests, all on loopback.

``Stack`` creates a fresh PostgreSQL database (``<DATABASE_URL's name>_stack_<pid>_<n>``), migrates and
seeds it (nodes, tenants, members, quotas, one API key per tenant), starts a PRIVATE
``redis-server`` on a free port (no persistence, so it can be restarted empty), a uvicorn
ASGI server, N ``celery worker --pool=solo`` processes and ``celery beat`` (reconcile every
second). Every process runs in its own process group and is stopped by process group.

Used by test_race.py, test_crash.py and tests/bench/lease_latency.py. Seeding runs in a
subprocess (``python -m tests.portal.leasing.stack seed '<json>'``) so that the caller's
own Django settings never point at the throwaway database.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit, urlunsplit

import httpx

from agents.protocol import SERVER_KEEP_ALIVE_S
from tests.portal.leasing.autoanalyze import Autoanalyze

ROOT = Path(__file__).resolve().parents[3]
PYTHON = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv" / "bin" / "python").exists() \
    else sys.executable
_counter = itertools.count()

# Lease states as stored (portal.leasing.models.LeaseState values).
TERMINAL = ("ended", "rejected", "cancelled", "failed", "preempted", "expired")
WAITING = ("queued", "scheduled")
TRANSITIONAL = ("requested", "provisioning", "notice", "releasing")  # notice: ends at end_at


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def raise_fd_limit() -> None:
    """This process's open-file limit up to the hard one, before it starts the stack's
    processes (they inherit it): a server holding 10,000 long-polls needs 10,000 sockets
    and the usual soft limit is 1,024. Production: ``LimitNOFILE=`` in the unit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and target > soft:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def _database_url() -> str:
    return os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpupool")


def db_prefix() -> str:
    """Throwaway databases are named after ``DATABASE_URL``'s (``gpupool_x`` →
    ``gpupool_x_stack_…``), so each engineer's stacks stay in their own name space."""
    name = urlsplit(_database_url()).path.lstrip("/") or "gpupool"
    return f"{name}_stack"


def server_url() -> str:
    """The PostgreSQL server of ``DATABASE_URL`` (database part dropped)."""
    parts = urlsplit(_database_url())
    return urlunsplit((parts.scheme, parts.netloc, "", "", ""))


@dataclass
class StackConfig:
    nodes: int = 8
    gpus_per_node: int = 8
    nodes_per_leaf: int = 8
    model: str = "H100"
    tenants: int = 8
    quota_gpus: int = 16
    max_pending: int = 20
    big_tenants: int = 0  # b0, b1…: no binding quota or pending limit (idempotency runs)
    workers: int = 2
    # The web tier: uvicorn processes (both cores: 2), each with its own wake-up listener.
    web_workers: int = 2
    # Idle keep-alive connections are kept this long (the protocol's contract, §1: uvicorn's
    # default, 5 s, makes a client that reports every few seconds reconnect each time).
    web_keep_alive_s: int = SERVER_KEEP_ALIVE_S
    web_backlog: int = 4096  # listen backlog: a fleet enrolling at once (somaxconn caps it)
    worker_loglevel: str = "WARNING"
    beat: bool = True
    reconcile_every_s: float = 1.0
    provision_timeout_s: int = 120
    # The ASGI server's settings: the real ones with CONN_MAX_AGE=0 (see stack_settings.py).
    web_settings: str = "tests.portal.leasing.stack_settings"
    env: dict[str, str] = field(default_factory=dict)
    # autovacuum's ANALYZE where the server has it off (autoanalyze.py)
    analyze_every_s: float = 20.0


class Stack:
    def __init__(self, config: StackConfig | None = None) -> None:
        self.config = config or StackConfig()
        self.tmp = Path(tempfile.mkdtemp(prefix=f"{db_prefix()}-"))  # our name space too
        self.db_name = f"{db_prefix()}_{os.getpid()}_{next(_counter)}"
        self.db_url = f"{server_url()}/{self.db_name}"
        self.redis_port = free_port()
        self.web_port = free_port()
        self.base_url = f"http://127.0.0.1:{self.web_port}"
        self.keys: dict[str, str] = {}
        self.tenant_ids: dict[str, str] = {}
        self.redis: subprocess.Popen[bytes] | None = None
        self.web: subprocess.Popen[bytes] | None = None
        self.beat: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []
        self._all: list[subprocess.Popen[bytes]] = []
        self._db_created = False
        self._seq = itertools.count()
        self.timings: dict[str, float] = {}
        self.autoanalyze = Autoanalyze(self.connect, self.config.analyze_every_s)

    # --- lifecycle --------------------------------------------------------------------------
    _previous_sigterm: Any = None

    def __enter__(self) -> Self:
        self._previous_sigterm = _exit_on_sigterm()
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        if self._previous_sigterm is not None:
            signal.signal(signal.SIGTERM, self._previous_sigterm)

    def start(self) -> None:
        began = time.perf_counter()
        raise_fd_limit()  # inherited by every process started below
        self._create_db()
        self.start_redis()
        self._seed()
        self.timings["seed_s"] = time.perf_counter() - began
        self.autoanalyze.start()  # this server runs without autovacuum (autoanalyze.py)
        self.start_web()
        for _ in range(self.config.workers):
            self.start_worker()
        if self.config.beat:
            self.start_beat()
        self._wait_web()
        self.timings["start_s"] = time.perf_counter() - began

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("GPUPOOL_CRASH", "PYTEST", "DJANGO_SETTINGS"))}
        env.update({
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "DATABASE_URL": self.db_url,
            "REDIS_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "GPUPOOL_SIMULATED_AGENTS": "1",
            # As in production: web processes read the scheduler caches as they start.
            "GPUPOOL_WARM_WEB": "1",
            # As in production: each process borrows connections from a psycopg pool.
            "DB_POOL": os.environ.get("GPUPOOL_STACK_DB_POOL", "1"),
            # Running spot leases get a short notice before preemption (production: 120 s).
            "GPUPOOL_PREEMPT_GRACE_S": "3",
            "GPUPOOL_RECONCILE_EVERY_S": str(self.config.reconcile_every_s),
            "GPUPOOL_PROVISION_TIMEOUT_S": str(self.config.provision_timeout_s),
            "GPUPOOL_DATA_DIR": str(self.tmp / "data"),
            # The harnesses flood orders on purpose (races, crashes): rate limits would answer
            # 429 before the code under test runs. Throttling has its own tests
            # (tests/portal/test_rate_limits_csp.py); a stack config may set real rates.
            "GPUPOOL_RATE_ORDERS": "1000000/min", "GPUPOOL_RATE_QUOTES": "1000000/min",
            "GPUPOOL_RATE_LOGIN": "1000000/min", "GPUPOOL_RATE_API_KEYS": "1000000/min",
            "EMAIL_BACKEND": "django.core.mail.backends.locmem.EmailBackend",
            "DEBUG": "0",
            "LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": str(ROOT),
        })
        env.update(self.config.env)
        env.update(extra)
        return env

    def _spawn(self, name: str, argv: list[str], env: dict[str, str],
               cwd: Path = ROOT) -> subprocess.Popen[bytes]:
        """Start ``argv`` in its own process group (stopped with the stack); ``cwd``: another
        tree's code (the previous release's agent, tests/upgrade)."""
        log = open(self.tmp / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        proc.name = name  # type: ignore[attr-defined]
        self._all.append(proc)
        return proc

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.tmp / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def logs(self, lines: int = 30) -> str:
        out = []
        for path in sorted(self.tmp.glob("*.log")):
            out.append(f"--- {path.name}\n{self.log_tail(path.stem, lines)}")
        return "\n".join(out) + self.errors()

    def errors(self, per_log: int = 2, lines: int = 60) -> str:
        """The first tracebacks of each log (a 500's cause scrolls out of the tails)."""
        out = []
        for path in sorted(self.tmp.glob("*.log")):
            text = path.read_text(errors="replace").splitlines()
            starts = [i for i, line in enumerate(text) if line.startswith("Traceback")]
            for i in starts[:per_log]:
                out.append(f"--- {path.name} line {i + 1}\n" + "\n".join(text[i:i + lines]))
        return ("\n=== tracebacks\n" + "\n".join(out)) if out else ""

    # --- PostgreSQL -------------------------------------------------------------------------
    def _admin(self) -> Any:
        import psycopg

        return psycopg.connect(f"{server_url()}/postgres", autocommit=True)

    def _create_db(self) -> None:
        with self._admin() as conn:
            conn.execute(f'CREATE DATABASE "{self.db_name}"')
        self._db_created = True

    def _drop_db(self) -> None:
        if not self._db_created:
            return
        with self._admin() as conn:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                         "WHERE datname = %s AND pid <> pg_backend_pid()", [self.db_name])
            conn.execute(f'DROP DATABASE IF EXISTS "{self.db_name}"')
        self._db_created = False

    def connect(self) -> Any:
        import psycopg

        return psycopg.connect(self.db_url, autocommit=True)

    def query(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        with self.connect() as conn:
            return list(conn.execute(sql, params).fetchall())

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[Callable[..., list[tuple[Any, ...]]]]:
        """A ``query`` whose every statement reads ONE snapshot (a read-only REPEATABLE
        READ transaction): a check made of several queries sees one state of the system,
        never a lease half-way through a transition between two of its queries."""
        import psycopg

        with psycopg.connect(self.db_url) as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")

            def q(sql: str, params: Any = None) -> list[tuple[Any, ...]]:
                return list(conn.execute(sql, params).fetchall())

            yield q
            conn.rollback()

    def running_leases_ending_within(self, seconds: float) -> int:
        """Running leases whose end falls within ``seconds`` from now (about to expire)."""
        rows = self.query("SELECT COUNT(*) FROM leasing_lease WHERE state IN ('active', "
                          "'notice') AND end_at < now() + make_interval(secs => %s)",
                          [seconds])
        return int(rows[0][0])

    def _seed(self) -> None:
        c = self.config
        spec = {"nodes": c.nodes, "gpus_per_node": c.gpus_per_node,
                "nodes_per_leaf": c.nodes_per_leaf, "model": c.model, "tenants": c.tenants,
                "quota_gpus": c.quota_gpus, "max_pending": c.max_pending,
                "big_tenants": c.big_tenants}
        out = subprocess.run([PYTHON, "-m", "tests.portal.leasing.stack", "seed",
                              json.dumps(spec)], cwd=ROOT, env=self.env(),
                             capture_output=True, text=True, timeout=600, check=False)
        if out.returncode != 0:
            raise RuntimeError(f"seeding failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
        result = json.loads(out.stdout.strip().splitlines()[-1])
        self.keys = result["keys"]
        self.tenant_ids = result["tenant_ids"]

    # --- Redis ------------------------------------------------------------------------------
    def start_redis(self) -> None:
        self.redis = self._spawn("redis", [
            "redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction",
            "--dir", str(self.tmp), "--protected-mode", "no"], self.env())
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.redis_ping():
                return
            time.sleep(0.05)
        raise RuntimeError(f"redis-server did not start\n{self.log_tail('redis')}")

    def redis_ping(self) -> bool:
        out = subprocess.run(["redis-cli", "-p", str(self.redis_port), "ping"],
                             capture_output=True, text=True, check=False, timeout=5)
        return out.stdout.strip() == "PONG"

    def restart_redis(self, down_s: float = 0.5) -> None:
        """``SHUTDOWN NOSAVE`` (every queued message is lost), then start it again empty."""
        subprocess.run(["redis-cli", "-p", str(self.redis_port), "shutdown", "nosave"],
                       capture_output=True, check=False, timeout=10)
        if self.redis is not None:
            try:
                self.redis.wait(10)
            except subprocess.TimeoutExpired:
                self._kill(self.redis, signal.SIGKILL)
        time.sleep(down_s)
        self.start_redis()

    # --- web, workers, beat -----------------------------------------------------------------
    def start_web(self) -> None:
        argv = [PYTHON, "-m", "uvicorn", "portal.asgi:application", "--host", "127.0.0.1",
                "--port", str(self.web_port), "--lifespan", "off", "--log-level", "warning",
                "--no-access-log", "--timeout-keep-alive", str(self.config.web_keep_alive_s),
                "--backlog", str(self.config.web_backlog)]
        if self.config.web_workers > 1:
            argv += ["--workers", str(self.config.web_workers)]
        self.web = self._spawn("web", argv,
                               self.env(DJANGO_SETTINGS_MODULE=self.config.web_settings))

    def _wait_web(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.web is not None and self.web.poll() is not None:
                raise RuntimeError(f"uvicorn exited\n{self.log_tail('web')}")
            with contextlib.suppress(httpx.HTTPError):
                r = httpx.get(f"{self.base_url}/api/v1/leases", timeout=5,
                              headers=self.auth(next(iter(self.keys))))
                if r.status_code == 200:
                    return
            time.sleep(0.2)
        raise RuntimeError(f"uvicorn not answering\n{self.log_tail('web')}")

    def start_worker(self, **extra_env: str) -> subprocess.Popen[bytes]:
        n = next(self._seq)
        proc = self._spawn(f"worker{n}", [
            PYTHON, "-m", "celery", "-A", "portal", "worker", "--pool=solo", "-Q", "control,celery",
            "-n", f"w{n}-{os.getpid()}@%h", "--without-gossip", "--without-mingle",
            "--without-heartbeat", f"--loglevel={self.config.worker_loglevel}"],
            self.env(**extra_env))
        self.workers.append(proc)
        return proc

    def start_beat(self) -> None:
        self.beat = self._spawn("beat", [
            PYTHON, "-m", "celery", "-A", "portal", "beat", "-s",
            str(self.tmp / "beat-schedule"), "--loglevel=WARNING", "--pidfile="], self.env())

    def kill_worker(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL the worker's whole process group (no warm shutdown, no ack)."""
        self._kill(proc, signal.SIGKILL)
        if proc in self.workers:
            self.workers.remove(proc)

    def stop_workers(self) -> None:
        for proc in list(self.workers):
            self._kill(proc, signal.SIGTERM)
        self.workers.clear()

    def wait_exit(self, proc: subprocess.Popen[bytes], timeout: float) -> int | None:
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes], sig: int) -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        else:
            # The leader is gone; make sure no child of its group lingers.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)

    def close(self) -> None:
        self.autoanalyze.stop()
        for proc in reversed(self._all):  # throwaway processes: no graceful shutdown
            with contextlib.suppress(Exception):
                self._kill(proc, signal.SIGKILL)
        self._all.clear()
        self.workers.clear()
        if os.environ.get("GPUPOOL_STACK_KEEP_DB") != "1":  # keep it to look around
            with contextlib.suppress(Exception):
                self._drop_db()
        if os.environ.get("GPUPOOL_STACK_KEEP_LOGS") != "1":
            shutil.rmtree(self.tmp, ignore_errors=True)

    # --- HTTP -------------------------------------------------------------------------------
    def auth(self, tenant: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[tenant]}"}

    def client(self, timeout: float = 30) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=timeout)

    # --- waiting and invariants ---------------------------------------------------------------
    def states(self, lease_ids: list[str] | None = None) -> dict[str, str]:
        if lease_ids is None:
            rows = self.query("SELECT id::text, state FROM leasing_lease")
        else:
            rows = self.query("SELECT id::text, state FROM leasing_lease WHERE id::text = ANY(%s)",
                              [lease_ids])
        return dict(rows)

    def wait_settled(self, lease_ids: list[str] | None = None, timeout: float = 60,
                     ok: tuple[str, ...] = ("active", *WAITING, *TERMINAL)) -> dict[str, str]:
        """Until every (given) lease is in an ``ok`` state; returns the last states seen."""
        deadline = time.monotonic() + timeout
        while True:
            states = self.states(lease_ids)
            if all(s in ok for s in states.values()) and (
                    lease_ids is None or len(states) == len(set(lease_ids))):
                return states
            if time.monotonic() > deadline:
                return states
            time.sleep(0.25)


def _grant_story(q: Any, node_id: int, lease_ids: set[str]) -> str:
    """For a grant mismatch: each lease's state, allocations on the node and events."""
    generations = q("SELECT d.generation, o.generation_applied FROM fleet_nodedesiredstate d "
                    "LEFT JOIN fleet_nodeobservedstate o ON o.node_id = d.node_id "
                    "WHERE d.node_id = %s", [node_id])
    lines = [f"\n  node {node_id} desired / applied generation: {generations}"]
    for grant in sorted(lease_ids):
        prefix = grant.removeprefix("ls_")
        for pk, state, targets, end_at in q(
                "SELECT id, state, provision_targets, end_at FROM leasing_lease "
                "WHERE replace(id::text, '-', '') LIKE %s", [prefix + "%"]):
            allocs = q("SELECT node_id, gpu_id, slot, live, start_at, end_at, "
                       "released_generation FROM leasing_allocation WHERE lease_id = %s "
                       "ORDER BY node_id, gpu_id, slot", [pk])
            events = q("SELECT created, from_state, to_state, kind, reason FROM "
                       "leasing_leaseevent WHERE lease_id = %s ORDER BY created, id", [pk])
            lines.append(f"\n  {grant}: state {state} targets {targets} end {end_at}"
                         f"\n    allocations {allocs}\n    events {events}")
    return "".join(lines)


def check_invariants(stack: Stack) -> list[str]:
    """Every invariant of issue 4 that SQL can check, all read from one snapshot; returns
    the violations (empty = fine)."""
    with stack.snapshot() as q:
        return _invariant_violations(q)


# Each allocation row's time on the hardware: from the lease's activation (or the row's
# own start, for a replacement written later) to the lease's end, or its fence when the
# slot's hardware failed (issue 27).
SLOT_SPANS = """spans AS (
                  SELECT a.gpu_id, a.slot, l.id AS lease,
                         GREATEST(l.active_at, a.start_at) AS t0,
                         LEAST(COALESCE(l.ended_at, 'infinity'), COALESCE((
                           SELECT min(f.fenced_at) FROM leasing_leasefault f
                           JOIN inventory_gpu g ON g.id = a.gpu_id
                           WHERE f.lease_id = l.id AND f.node_id = a.node_id
                             AND f.gpu_indexes @> to_jsonb(g.index)
                             AND f.fenced_at >= a.start_at), 'infinity')) AS t1
                  FROM leasing_allocation a JOIN leasing_lease l ON l.id = a.lease_id
                  WHERE l.active_at IS NOT NULL)"""


def _invariant_violations(q: Callable[..., list[tuple[Any, ...]]]) -> list[str]:
    problems: list[str] = []
    # 1. No GPU slot held by two live allocations at overlapping times (the DB constraint's job).
    rows = q("""SELECT a.gpu_id, a.slot, a.lease_id, b.lease_id FROM leasing_allocation a
                JOIN leasing_allocation b ON a.gpu_id = b.gpu_id AND a.slot = b.slot
                 AND a.id < b.id AND a.live AND b.live
                 AND a.start_at < b.end_at AND b.start_at < a.end_at LIMIT 5""")
    problems += [f"live slot overlap: {r}" for r in rows]
    # 2. What really ran: two leases active on the same GPU slot at the same time. A slot
    #    fenced out of its lease (failed hardware, issue 27) ran until its fence; a
    #    replacement's slot from when it was written.
    rows = q(f"""WITH {SLOT_SPANS},
                used AS (SELECT gpu_id, slot, lease, tstzrange(t0, t1) AS span FROM spans
                         WHERE t1 > t0)
                SELECT x.gpu_id, x.slot, x.lease, y.lease FROM used x JOIN used y
                  ON x.gpu_id = y.gpu_id AND x.slot = y.slot AND x.lease < y.lease
                 AND x.span && y.span LIMIT 5""")
    problems += [f"GPU slot used by two active leases at once: {r}" for r in rows]
    # 3. Per GPU, slots on the hardware at each instant a slot started there ≤ 8.
    rows = q(f"""WITH {SLOT_SPANS},
                instants AS (SELECT DISTINCT gpu_id, t0 AS t FROM spans)
                SELECT i.gpu_id, i.t, COUNT(*) FROM instants i JOIN spans u
                  ON u.gpu_id = i.gpu_id AND u.t0 <= i.t AND i.t < u.t1
                GROUP BY i.gpu_id, i.t HAVING COUNT(*) > 8 LIMIT 5""")
    problems += [f"GPU over-committed: {r}" for r in rows]
    # 4. Quota: per tenant and model, GPUs of leases active at each activation instant ≤ max.
    rows = q("""WITH act AS (
                  SELECT tenant_id, gpu_model, active_at AS t0,
                         COALESCE(ended_at, 'infinity') AS t1,
                         gpu_count * nodes * gpu_milli / 1000.0 AS gpus
                  FROM leasing_lease WHERE active_at IS NOT NULL),
                instants AS (SELECT DISTINCT tenant_id, gpu_model, t0 AS t FROM act)
                SELECT i.tenant_id, i.gpu_model, i.t, SUM(a.gpus), MAX(qu.max_gpus)
                FROM instants i JOIN act a ON a.tenant_id = i.tenant_id
                  AND a.gpu_model = i.gpu_model AND a.t0 <= i.t AND i.t < a.t1
                JOIN leasing_quota qu ON qu.tenant_id = i.tenant_id
                  AND qu.gpu_model IN (i.gpu_model, '')
                GROUP BY i.tenant_id, i.gpu_model, i.t HAVING SUM(a.gpus) > MAX(qu.max_gpus)
                LIMIT 5""")
    problems += [f"quota overrun (active): {r}" for r in rows]
    # 5. Quota as booked: live allocations at each allocation start ≤ max.
    rows = q("""WITH al AS (
                  SELECT l.tenant_id, g.model, a.start_at, a.end_at FROM leasing_allocation a
                  JOIN leasing_lease l ON l.id = a.lease_id
                  JOIN inventory_gpu g ON g.id = a.gpu_id WHERE a.live),
                instants AS (SELECT DISTINCT tenant_id, model, start_at AS t FROM al)
                SELECT i.tenant_id, i.model, i.t, COUNT(*) / 8.0, MAX(qu.max_gpus)
                FROM instants i JOIN al ON al.tenant_id = i.tenant_id AND al.model = i.model
                  AND al.start_at <= i.t AND i.t < al.end_at
                JOIN leasing_quota qu ON qu.tenant_id = i.tenant_id
                  AND qu.gpu_model IN (i.model, '')
                GROUP BY i.tenant_id, i.model, i.t HAVING COUNT(*) / 8.0 > MAX(qu.max_gpus)
                LIMIT 5""")
    problems += [f"quota overrun (booked): {r}" for r in rows]
    # 5b. Pending orders per tenant (sampled now) within the tenant's limit.
    rows = q("""SELECT l.tenant_id, COUNT(*), MIN(qu.max_pending_orders) FROM leasing_lease l
                JOIN leasing_quota qu ON qu.tenant_id = l.tenant_id
                WHERE l.state IN ('requested', 'queued', 'scheduled')
                GROUP BY l.tenant_id HAVING COUNT(*) > MIN(qu.max_pending_orders)""")
    problems += [f"pending orders over the limit: {r}" for r in rows]
    # 6. No leaked allocation: none live for a lease in a terminal or waiting state.
    rows = q("""SELECT l.id, l.state, COUNT(*) FROM leasing_allocation a
                JOIN leasing_lease l ON l.id = a.lease_id
                WHERE a.live AND l.state = ANY(%s) GROUP BY l.id, l.state LIMIT 5""",
             [[*TERMINAL, "queued", "requested"]])
    problems += [f"leaked allocation: {r}" for r in rows]
    # 7. A holding lease holds exactly what it asked for.
    rows = q("""SELECT l.id, l.state, COUNT(a.id), l.gpu_count * l.nodes * l.gpu_milli / 125
                FROM leasing_lease l LEFT JOIN leasing_allocation a
                  ON a.lease_id = l.id AND a.live
                WHERE l.state IN ('scheduled', 'provisioning', 'active', 'notice')
                GROUP BY l.id HAVING COUNT(a.id) <> l.gpu_count * l.nodes * l.gpu_milli / 125
                LIMIT 5""")
    problems += [f"holding lease with wrong allocation: {r}" for r in rows]
    # 8. Agent side effects: one access grant per lease per node document, exactly for the
    #    leases that hold GPUs on that node and are provisioning/active.
    docs = q("SELECT node_id, generation, document FROM fleet_nodedesiredstate")
    wanted: dict[int, set[str]] = {}
    for node_id, lease_hex in q("""SELECT DISTINCT a.node_id, replace(l.id::text, '-', '')
                                   FROM leasing_allocation a
                                   JOIN leasing_lease l ON l.id = a.lease_id
                                   WHERE a.live AND l.state IN ('provisioning', 'active', 'notice')"""):
        wanted.setdefault(node_id, set()).add(f"ls_{lease_hex[:16]}")
    seen_nodes = set()
    for node_id, generation, doc in docs:
        seen_nodes.add(node_id)
        grants = [g["lease_id"] for g in (doc or {}).get("access_grants", [])]
        if len(grants) != len(set(grants)):
            problems.append(f"node {node_id}: duplicate access grants {grants}")
        if (doc or {}).get("generation", generation) != generation:
            problems.append(f"node {node_id}: document generation {doc.get('generation')} "
                            f"!= row generation {generation}")
        if set(grants) != wanted.get(node_id, set()):
            problems.append(f"node {node_id}: grants {sorted(grants)} != holders "
                            f"{sorted(wanted.get(node_id, set()))}"
                            + _grant_story(q, node_id, set(grants) ^ wanted.get(node_id, set())))
    for node_id in set(wanted) - seen_nodes:
        problems.append(f"node {node_id}: holders {sorted(wanted[node_id])} but no document")
    # 9. Agents converged: observed generation = desired generation (a node sent to repair
    #    is not waited for: a dead host cannot converge, its fence is at the fabric).
    rows = q("""SELECT d.node_id, d.generation, o.generation_applied
                FROM fleet_nodedesiredstate d LEFT JOIN fleet_nodeobservedstate o
                  ON o.node_id = d.node_id JOIN inventory_node n ON n.id = d.node_id
                WHERE o.generation_applied IS DISTINCT FROM d.generation
                  AND n.service IN ('in_service', 'suspect') LIMIT 5""")
    problems += [f"node not converged: {r}" for r in rows]
    return problems


def _seed_main(spec: dict[str, Any]) -> dict[str, Any]:
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import transaction

    from portal.inventory.generator import ClusterSpec, cluster_generate
    from portal.leasing.models import Quota
    from portal.tenants.models import Membership, Role, Tenant
    from portal.tenants.services import api_key_create

    call_command("migrate", verbosity=0, interactive=False)
    keys: dict[str, str] = {}
    tenant_ids: dict[str, str] = {}
    with transaction.atomic():
        cluster_generate(actor=None, spec=ClusterSpec(
            nodes=spec["nodes"], gpus_per_node=spec["gpus_per_node"],
            nodes_per_leaf=spec["nodes_per_leaf"], spines=2, model=spec["model"],
            prefix="node", fabric="stack-fabric"))
        users = get_user_model()
        big = 1_000_000
        tenants = [(f"t{i}", spec["quota_gpus"], spec["max_pending"])
                   for i in range(spec["tenants"])]
        tenants += [(f"b{i}", big, big) for i in range(spec.get("big_tenants", 0))]
        for slug, quota_gpus, max_pending in tenants:
            tenant = Tenant.objects.create(slug=slug, name=f"Tenant {slug}",
                                           contact_email=f"ops@{slug}.example")
            Quota.objects.create(tenant=tenant, gpu_model=spec["model"], max_gpus=quota_gpus,
                                 guaranteed_gpus=quota_gpus // 4,
                                 max_pending_orders=max_pending)
            user = users.objects.create_user(username=f"member-{slug}",
                                             email=f"member@{slug}.example")
            Membership.objects.create(tenant=tenant, user=user, role=Role.MEMBER)
            keys[slug] = api_key_create(actor=user, name="stack", tenant=tenant).secret
            tenant_ids[slug] = str(tenant.pk)
    return {"keys": keys, "tenant_ids": tenant_ids}


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "seed":
        print(json.dumps(_seed_main(json.loads(sys.argv[2]))))
    else:
        print("usage: python -m tests.portal.leasing.stack seed '<json spec>'", file=sys.stderr)
        sys.exit(2)


__all__ = ["Stack", "StackConfig", "check_invariants", "free_port"]


def _exit_on_sigterm() -> Any:
    """SIGTERM (``timeout``, CI, a kill) raises SystemExit in the main thread, so the
    ``with Stack`` block closes and no uvicorn, Celery, simulator or Redis is left running
    (finding: ``timeout`` on a benchmark left its whole stack behind). Returns the handler
    it replaced, or None where signals cannot be set (not the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    return signal.signal(signal.SIGTERM, stop)
