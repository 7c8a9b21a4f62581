"""Order → active and release → ended with REAL agents (issue 12).

The production path, measured: PostgreSQL + a private Redis + uvicorn + 2 Celery workers
+ beat (``tests.portal.leasing.stack``, ``GPUPOOL_SIMULATED_AGENTS=0``, reconciler every
``--reconcile-every`` s), ``--nodes`` real ``python -m agents node`` processes over HTTP,
each on a fake sysfs tree (with the inventory's port GUIDs), a fake procfs and fake NVML
(``h100x8``), plus the real ``python -m agents fabric`` process.

The subnet manager (``--sm``, default ``auto``):

- ``opensm`` (auto when ``ibsim``/``opensm``/``infiniband-diags`` are installed): a real
  OpenSM on an ibsim fabric of one leaf and one HCA per node (the inventory adopts ibsim's
  GUIDs); the fabric agent drives it (driver ``opensm``: ``partitions.conf`` + SIGHUP,
  verified with ``smpquery``). Each node's sysfs shows its HCA's P_Key table, read with
  ``smpquery pkeys``: by default (``--sysfs-from hca``) whenever ``partitions.conf``
  changes, as a kernel shows its HCA's table the moment the SM has programmed it; with
  ``--sysfs-from report`` only once the fabric agent has reported the map applied (this
  benchmark before ADR 0135).
- ``fake``: the fabric agent runs driver ``fake``; once it reports a map applied, this
  script writes each member port's P_Keys into sysfs after ``--sm-delay`` seconds.

The load (``Churn``): ``--orders`` orders (default 40), one every ``--interval`` s, each
lease released ``--hold`` s after it is active, at most ``--max-gpus`` held (default half
the pool, so no order waits for capacity); orders and releases interleave.

Breakdown stamps. Order, seconds after the order is created: placed = the lease event to
``provisioning``; desired written = the audit row of the node's desired state; applied /
converged report = the agent's own log lines (``desired state applied``, ``converged``);
partition set = each port's first table change in sysfs after its node's state was
written (none: it already held the key); report stored = the portal storing the node's
first report after it converged (``fleet_agentreport.received``); active = ``active_at``.
Release, seconds after the release request: release requested (the ``releasing`` event),
desired written, node revoked (agent), partition removed (SM), converged report (agent),
report stored (portal), ended (the ``ended`` event).

    python -m tests.bench.real_agents --nodes 8     # make bench-real-agents

Prints p50/p90/p99/max of order → active, release → ended and every step (``--verbose``:
each lease's timelines), then the idle database commit rate.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from agents.config import FABRIC_DEFAULTS
from agents.fabric.opensm import parse_block, parse_smpquery_pkeys, split_conf
from agents.host import write_fake_proc
from agents.sysfs.faketree import FakeHca, FakePort, FakeSysfsWriter
from tests.portal.leasing.stack import PYTHON, ROOT, Stack, StackConfig, server_url


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(len(ordered) * p), len(ordered) - 1)]


def _summary(values: list[float]) -> str:
    if not values:
        return "n=0"
    return (f"p50 {statistics.median(values):.2f} s, p90 {_pct(values, 0.9):.2f} s, "
            f"p99 {_pct(values, 0.99):.2f} s, max {max(values):.2f} s (n={len(values)})")


@dataclass
class NodeHost:
    hostname: str
    pk: int
    root: Path
    writer: FakeSysfsWriter
    ports: dict[str, tuple[str, int]] = field(default_factory=dict)  # guid -> (device, port)


def _manage(stack: Stack, *args: str) -> str:
    out = subprocess.run([PYTHON, "-m", "django", *args], cwd=ROOT, env=stack.env(),
                         capture_output=True, text=True, timeout=120, check=True)
    return out.stdout


def _tokens(stack: Stack, role: str, count: int, hostname: str) -> list[str]:
    """Bootstrap tokens, bound to ``hostname`` (a name or an fnmatch pattern, as
    ``agent_token create --hostname`` requires)."""
    return _manage(stack, "agent_token", "create", "--role", role, "--hostname", hostname,
                   "--count", str(count)).split()


def _hosts(stack: Stack, base: Path) -> list[NodeHost]:
    rows = stack.query("""SELECT n.id, n.hostname, p.device, p.port_number, p.port_guid,
                                 p.node_guid FROM inventory_node n
                          JOIN inventory_hcaport p ON p.node_id = n.id
                          ORDER BY n.hostname, p.device""")
    hosts: dict[str, NodeHost] = {}
    for pk, hostname, device, port, port_guid, node_guid in rows:
        if hostname not in hosts:
            root = base / hostname
            hosts[hostname] = NodeHost(hostname, pk, root, FakeSysfsWriter(root / "sys"))
            write_fake_proc(root / "proc", hostname, cpus=8, mem_gib=2)
        host = hosts[hostname]
        host.writer.add(FakeHca(name=device, node_guid=int(node_guid, 16),
                                node_desc=f"{hostname} {device}",
                                ports=[FakePort(num=port, port_guid=int(port_guid, 16))]))
        host.ports[port_guid] = (device, port)
    return list(hosts.values())


def _agent_config(path: Path, url: str, token: str, root: Path, role: str,
                  fabric: str = "") -> Path:
    hardware = (f'sysfs_root = "{root / "sys"}"\nproc_root = "{root / "proc"}"\n')
    if role == "node":
        hardware += f'fake_gpus = "h100x8"\naccess_root = "{root / "access"}"\n'
    extra = (fabric or '[fabric]\ndriver = "fake"\n') if role == "fabric" else ""
    path.write_text(f'[portal]\nurl = "{url}"\nbootstrap_token = "{token}"\n'
                    f'[agent]\nstate_dir = "{root / "state"}"\n'
                    f"[hardware]\n{hardware}{extra}[metrics]\nlisten = \"\"\n"
                    '[log]\nlevel = "INFO"\n')
    return path


def _start_agents(stack: Stack, hosts: list[NodeHost], base: Path, ibsim: Ibsim | None) -> None:
    env = {**(ibsim.env if ibsim else stack.env()), "GPUPOOL_AGENT_PORTAL_TIMEOUT_S": "40"}
    pattern = os.path.commonprefix([h.hostname for h in hosts]).rstrip("0123456789") + "*"
    for host, token in zip(hosts, _tokens(stack, "node", len(hosts), pattern), strict=True):
        cfg = _agent_config(host.root / "agent.toml", stack.base_url, token, host.root, "node")
        stack._spawn(f"agent-{host.hostname}", [PYTHON, "-m", "agents", "node", "--config",
                                                str(cfg)], env)
    start_fabric_agent(stack, base, ibsim, env)


def start_fabric_agent(stack: Stack, base: Path, ibsim: Ibsim | None,
                       env: dict[str, str]) -> None:
    """The real fabric agent: OpenSM on ibsim when given, else its fake driver."""
    fabric = base / "fabric"
    FakeSysfsWriter(fabric / "sys")
    write_fake_proc(fabric / "proc", "sm-host", cpus=2, mem_gib=1)
    token = _tokens(stack, "fabric", 1, "sm-host")[0]
    cfg = _agent_config(fabric / "fabric.toml", stack.base_url, token,
                        fabric, "fabric", ibsim.fabric_config() if ibsim else "")
    argv = [PYTHON, "-m", "agents", "fabric", "--config", str(cfg)]
    if ibsim is not None:  # its smpquery calls run under ibsim-run: keep sys-<pid>/ there
        ibsim.spawn("agent-fabric", argv, env)
    else:
        stack._spawn("agent-fabric", argv, env)


def _wait_enrolled(stack: Stack, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = stack.query("SELECT count(DISTINCT agent_id) FROM fleet_agentreport")
        if rows[0][0] >= count:
            return
        time.sleep(0.25)
    raise RuntimeError(f"agents did not enrol and report\n{stack.logs(15)}")


class SubnetManager(threading.Thread):
    """Puts each port's P_Key table into its node's sysfs once the fabric agent has applied
    (and, for OpenSM, verified) a partition map; records when."""

    name_ = "fake SM on sysfs (fabric agent driver=fake)"

    def __init__(self, stack: Stack, hosts: list[NodeHost], delay_s: float) -> None:
        super().__init__(daemon=True, name="sm")
        self.stack, self.delay_s, self.stop = stack, delay_s, threading.Event()
        self.by_guid = {g: (h, dp) for h in hosts for g, dp in h.ports.items()}
        self.programmed: dict[int, float] = {}  # fabric generation -> wall time keys written
        self.changes: dict[str, list[float]] = {}  # port GUID -> when its table changed
        self.done = 0

    def run(self) -> None:
        with self.stack.connect() as conn:
            while not self.stop.wait(0.02):
                row = conn.execute("""SELECT d.generation, d.document FROM
                    fleet_fabricdesiredstate d JOIN fleet_fabricobservedstate o
                    ON o.name = d.name WHERE o.generation_applied >= d.generation""").fetchone()
                if row is not None and row[0] > self.done:
                    tables = self.tables(row[1])
                    for guid, (host, (device, port)) in self.by_guid.items():
                        self.write(guid, tables[guid])
                    self.programmed[row[0]] = time.time()
                    self.done = row[0]

    def write(self, guid: str, keys: list[int]) -> None:
        host, (device, port) = self.by_guid[guid]
        if _write_table(host, device, port, keys):
            self.changes.setdefault(guid, []).append(time.time())

    def tables(self, document: dict[str, Any]) -> dict[str, list[int]]:
        """What the SM puts in each port's table for this map (after ``delay_s``)."""
        time.sleep(self.delay_s)
        keys: dict[str, list[int]] = {g: [0xFFFF] for g in self.by_guid}
        for part in document.get("partitions", []):
            key = int(part["pkey"], 16) & 0x7FFF
            for member in part.get("members", []):
                if member["guid"] in keys:
                    full = member["membership"] == "full"
                    keys[member["guid"]].append(key | 0x8000 if full else key)
        return keys


class OpenSmBridge(SubnetManager):
    """A real OpenSM has programmed the (ibsim) HCAs; copy each port's table, read with
    ``smpquery pkeys``, into the node's sysfs, as the kernel shows the HCA's table."""

    name_ = "real OpenSM on ibsim (fabric agent driver=opensm), tables copied to sysfs"

    def __init__(self, stack: Stack, hosts: list[NodeHost], fabric: Ibsim) -> None:
        super().__init__(stack, hosts, 0.0)
        self.fabric = fabric

    def tables(self, document: dict[str, Any]) -> dict[str, list[int]]:
        # all ports at once: read one by one, the copy itself lagged by 8 × smpquery
        with ThreadPoolExecutor(IBSIM_READERS) as pool:
            return dict(zip(self.by_guid, pool.map(self.fabric.pkeys, self.by_guid),
                            strict=True))


class HcaTables(SubnetManager):
    """What the kernel does on a real node: the node's sysfs shows its HCA's P_Key table as
    the SM programs it, whether or not the fabric agent has reported anything. Whenever
    ``partitions.conf`` changes, the tables of the ports that do not hold what the file
    says are read with ``smpquery pkeys`` (4 at once) at short, growing intervals (50 ms
    doubling to 250 ms, for at most 15 s) until all of them do, and each port's table goes
    into its node's sysfs the moment it is read. ``programmed[g]``: when every port held map
    ``g`` (its ``# generation`` line)."""

    name_ = "real OpenSM on ibsim (fabric agent driver=opensm), HCA tables copied to sysfs"

    def __init__(self, stack: Stack, hosts: list[NodeHost], fabric: Ibsim) -> None:
        super().__init__(stack, hosts, 0.0)
        self.fabric = fabric
        self.pool = ThreadPoolExecutor(IBSIM_READERS)

    def run(self) -> None:
        text, poll_at, step, until, generation = "", 0.0, 0.05, 0.0, 0
        want: dict[str, set[int]] = {}
        seen: dict[str, set[int]] = {}  # each port's tenant keys as last read
        while not self.stop.wait(0.02):
            now = time.monotonic()
            current = self.fabric.conf.read_text()
            if current != text:  # a new map: watch the ports until they hold it
                text, poll_at, step, until = current, now + 0.05, 0.05, now + 15
                want, generation = self.wanted(current), _conf_generation(current)
            if now < poll_at or now > until:
                continue
            # only the ports that do not hold the map yet (the SM changes no other)
            todo = [g for g in self.by_guid if seen.get(g) != want[g]]
            for guid, table in zip(todo, self.pool.map(self._pkeys, todo), strict=True):
                if table is not None:
                    self.write(guid, table)
                    seen[guid] = _tenant_keys(table)
            if all(seen.get(g) == want[g] for g in self.by_guid):
                self.programmed.setdefault(generation, time.time())
                until = 0.0
            poll_at, step = time.monotonic() + step, min(step * 2, 0.25)

    def _pkeys(self, guid: str) -> list[int] | None:
        try:
            return self.fabric.pkeys(guid)
        except subprocess.CalledProcessError:  # ibsim busy: read again next step
            return None

    def wanted(self, conf: str) -> dict[str, set[int]]:
        """Each port's tenant keys (16-bit) as the file's block says."""
        out: dict[str, set[int]] = {g: set() for g in self.by_guid}
        for key, members in parse_block(split_conf(conf)[1]).items():
            for guid, membership in members.items():
                if guid in out:
                    out[guid].add(key | 0x8000 if membership == "full" else key)
        return out


def _tenant_keys(table: list[int]) -> set[int]:
    return {k for k in table if k & 0x7FFF not in (0, 0x7FFF)}


def _conf_generation(conf: str) -> int:
    m = re.search(r"^# generation (\d+)$", conf, re.M)
    return int(m.group(1)) if m else 0


def _write_table(host: NodeHost, device: str, port: int, keys: list[int]) -> bool:
    """Like an SM's SubnSet(P_KeyTable): only the entries that change (pkeys/<i>);
    True if any did."""
    size = host.writer.pkey_table_size
    new = [*keys, *([0] * (size - len(keys)))][:size]
    fake_port = next(p for p in host.writer.hcas[device].ports if p.num == port)
    old = [*fake_port.pkeys, *([0] * (size - len(fake_port.pkeys)))][:size]
    table = host.root / "sys" / "class" / "infiniband" / device / "ports" / str(port) / "pkeys"
    for i, (before, after) in enumerate(zip(old, new, strict=True)):
        if before != after:
            tmp = table / f".{i}.tmp"
            tmp.write_text(f"0x{after:04x}\n")
            tmp.replace(table / str(i))
    changed = sorted(fake_port.pkeys) != sorted(keys)
    fake_port.pkeys = list(keys)
    return changed


# --- a real OpenSM on an ibsim fabric ------------------------------------------------------
IBSIM_TOOLS = ("ibsim", "ibsim-run", "opensm", "smpquery", "ibnetdiscover")
# ibsim serves at most 10 clients and OpenSM is one: the fabric agent and this script's
# HCA reader get 4 each (a real HCA has no such limit: the agent's default is 8)
IBSIM_READERS = 4
CA_RE = re.compile(r'^Ca\s+\d+\s+"H-([0-9a-f]+)"\s+#\s+"(\S+) \S+"')
PORT_RE = re.compile(r"^\[1\]\(([0-9a-f]+)\)")


def ibsim_available() -> bool:
    return all(shutil.which(t) or Path("/usr/sbin", t).exists() for t in IBSIM_TOOLS)


class Ibsim:
    """ibsim with one leaf switch and one HCA per host, and OpenSM on it (ibsim-run)."""

    def __init__(self, stack: Stack, hostnames: list[str], work: Path) -> None:
        self.stack, self.work = stack, work
        self.env = {**stack.env(), "IBSIM_SOCKNAME": f"gpupool-bench-{os.getpid()}"}
        self.conf, self.pid_file = work / "partitions.conf", work / "opensm.pid"
        self.fabric_readers = IBSIM_READERS  # the fabric agent's smpquery processes at once
        self.node_guids: dict[str, str] = {}  # hostname -> node GUID
        self.port_guids: dict[str, str] = {}  # hostname -> port GUID
        work.mkdir(parents=True, exist_ok=True)
        lines = ['Switch\t36 "leaf-01"'] + [f'[{i + 1}]\t"{h} mlx5_0"[1]'
                                             for i, h in enumerate(hostnames)]
        for i, h in enumerate(hostnames):
            lines += ["", f'Hca\t1 "{h} mlx5_0"', f'[1]\t"leaf-01"[{i + 1}]']
        (work / "fabric.net").write_text("\n".join(lines) + "\n")

    def start(self) -> None:
        self.conf.write_text("Default=0x7fff,ipoib : ALL=limited, SELF=full ;\n")
        self.spawn("ibsim", ["ibsim", "-n", "-s", str(self.work / "fabric.net")])
        self._wait("ibsim", "ready")
        osm = self.spawn("opensm", ["ibsim-run", "opensm", "-f", str(self.work / "osm.log"),
                                    "-P", str(self.conf)])
        self.pid_file.write_text(f"{osm.pid}\n")
        self._wait("opensm", "MASTER", 60)
        self._discover()

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Any:
        """As ``Stack._spawn`` (stopped with the stack), but in the ibsim work directory:
        umad2sim (``ibsim-run``) creates ``sys-<pid>/`` in the current directory."""
        with open(self.stack.tmp / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(argv, cwd=self.work, env=env or self.env, stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        self.stack._all.append(proc)
        return proc

    def _wait(self, log: str, text: str, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.stack.log_tail(log, 200):
                return
            time.sleep(0.2)
        raise RuntimeError(f"{log} not up\n{self.stack.log_tail(log)}")

    def run(self, *argv: str) -> str:
        return subprocess.run(["ibsim-run", *argv], env=self.env, cwd=self.work,
                              capture_output=True, text=True, timeout=30, check=True).stdout

    def _discover(self) -> None:
        host = None
        for line in self.run("ibnetdiscover").splitlines():
            if m := CA_RE.match(line):
                host = m.group(2)
                self.node_guids[host] = f"0x{int(m.group(1), 16):016x}"
            elif host and (m := PORT_RE.match(line)):
                self.port_guids[host] = f"0x{int(m.group(1), 16):016x}"
                host = None

    def pkeys(self, guid: str) -> list[int]:
        return parse_smpquery_pkeys(self.run("smpquery", "-G", "pkeys", guid))

    def adopt_guids(self) -> None:
        """Make the inventory's ports the ibsim HCAs' (before the agents report)."""
        with self.stack.connect() as conn:
            for host, guid in self.port_guids.items():
                conn.execute("""UPDATE inventory_hcaport SET port_guid = %s, node_guid = %s
                                WHERE device = 'mlx5_0' AND node_id =
                                (SELECT id FROM inventory_node WHERE hostname = %s)""",
                             [guid, self.node_guids[host], host])

    def fabric_config(self) -> str:
        return (f'[fabric]\ndriver = "opensm"\npartitions_conf = "{self.conf}"\n'
                f'opensm_pid_file = "{self.pid_file}"\ndiag_prefix = "ibsim-run"\n'
                'default_membership = "limited"\n' + (
                    f"read_back_parallel = {self.fabric_readers}\n"  # before ADR 0135: none
                    if "read_back_parallel" in FABRIC_DEFAULTS["fabric"] else ""))


def _agent_events(stack: Stack, hosts: list[NodeHost]) -> dict[tuple[int, str, int], float]:
    """(node pk, message, generation) -> first wall time, from the agents' JSON logs."""
    out: dict[tuple[int, str, int], float] = {}
    for host in hosts:
        path = stack.tmp / f"agent-{host.hostname}.log"
        for line in path.read_text(errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("msg") in ("desired state applied", "converged") and "generation" in rec:
                ts = datetime.fromisoformat(rec["ts"].replace("Z", "+00:00")).timestamp()
                out.setdefault((host.pk, rec["msg"], int(rec["generation"])), ts)
    return out


def _order(stack: Stack, tenant: str, gpus: int) -> str:
    with stack.client() as c:
        r = c.post("/api/v1/orders", json={"gpu_count": gpus, "duration_hours": "1",
                                           "name": "bench"},
                   headers={**stack.auth(tenant), "Idempotency-Key": str(uuid.uuid4())})
    r.raise_for_status()
    return str(r.json()["id"])


def _release(stack: Stack, tenant: str, lease_id: str) -> float:
    t0 = time.time()
    with stack.client() as c:
        c.post(f"/api/v1/leases/{lease_id}/release", json={"reason": "bench"},
               headers=stack.auth(tenant)).raise_for_status()
    return t0


@dataclass
class Churn:
    """Orders every ``interval`` s (sizes 1/2/4/8 GPUs, at most ``max_gpus`` held at
    once so that no order waits for capacity); each lease is released ``hold`` s after
    it is ACTIVE. Orders and releases interleave as in production, so the fabric map
    keeps changing while leases start and end."""

    stack: Stack
    orders: int
    interval: float
    hold: float
    max_gpus: int
    timeout: float
    leases: dict[str, tuple[str, int]] = field(default_factory=dict)  # id -> tenant, GPUs
    released: dict[str, float] = field(default_factory=dict)  # id -> release requested
    release_due: dict[str, float] = field(default_factory=dict)

    def run(self) -> dict[str, str]:
        rng, tenants = random.Random(12), sorted(self.stack.keys)
        sizes = [rng.choice([1, 2, 4, 8]) for _ in range(self.orders)]
        states: dict[str, str] = {}
        next_order, deadline = time.monotonic(), time.monotonic() + self.timeout
        with ThreadPoolExecutor(4) as pool:
            calls: list[Any] = []
            while time.monotonic() < deadline:
                states = self.stack.states(list(self.leases)) if self.leases else {}
                if len(self.leases) == self.orders and self._settled(states):
                    break
                now = time.monotonic()
                for lid, state in states.items():
                    if state == "active" and lid not in self.release_due:
                        self.release_due[lid] = now + self.hold
                    if lid not in self.released and self.release_due.get(lid, now + 1) <= now:
                        self.released[lid] = 0.0
                        calls.append(pool.submit(self._release, lid))
                held = sum(g for lid, (_, g) in self.leases.items()
                           if states.get(lid) not in TERMINAL_STATES)
                i = len(self.leases)
                if i < self.orders and now >= next_order and held + sizes[i] <= self.max_gpus:
                    tenant = tenants[i % len(tenants)]
                    self.leases[_order(self.stack, tenant, sizes[i])] = (tenant, sizes[i])
                    next_order = now + self.interval
                time.sleep(0.05)
            for call in calls:
                call.result()
        return states

    def _release(self, lid: str) -> None:
        self.released[lid] = _release(self.stack, self.leases[lid][0], lid)

    def _settled(self, states: dict[str, str]) -> bool:
        """Every lease ended, or gave up on (never active: not released)."""
        return all(s in TERMINAL_STATES and (lid not in self.released or self.released[lid])
                   for lid, s in states.items())


TERMINAL_STATES = ("ended", "rejected", "cancelled", "failed", "preempted", "expired")


def _lease_rows(stack: Stack, ids: list[str]) -> dict[str, dict[str, Any]]:
    rows = stack.query("""SELECT l.id::text, EXTRACT(EPOCH FROM l.created),
            EXTRACT(EPOCH FROM l.active_at),
            (SELECT EXTRACT(EPOCH FROM min(e.created)) FROM leasing_leaseevent e
              WHERE e.lease_id = l.id AND e.to_state = 'provisioning'),
            (SELECT EXTRACT(EPOCH FROM min(e.created)) FROM leasing_leaseevent e
              WHERE e.lease_id = l.id AND e.to_state = 'ended'),
            (SELECT EXTRACT(EPOCH FROM min(e.created)) FROM leasing_leaseevent e
              WHERE e.lease_id = l.id AND e.to_state = 'releasing'),
            ARRAY(SELECT DISTINCT g.node_id FROM leasing_allocation a
                  JOIN inventory_gpu g ON g.id = a.gpu_id WHERE a.lease_id = l.id)
            FROM leasing_lease l WHERE l.id::text = ANY(%s)""", [ids])

    def f(v: Any) -> float | None:
        return float(v) if v is not None else None

    return {r[0]: {"created": float(r[1]), "active": f(r[2]), "placed": f(r[3]),
                   "ended": f(r[4]), "releasing": f(r[5]), "nodes": list(r[6])} for r in rows}


def _desired_writes(stack: Stack) -> list[tuple[str, int, float]]:
    """(object id, generation, wall time) of every node/fabric desired-state write."""
    rows = stack.query("""SELECT CASE WHEN action = 'fleet.fabric_desired_set' THEN 'fabric'
                                 ELSE object_id END, (changes->>'generation')::int,
                                 EXTRACT(EPOCH FROM created) FROM core_auditlog
                          WHERE action IN ('fleet.node_desired_set', 'fleet.fabric_desired_set')
                          ORDER BY created""")
    return [(str(r[0]), int(r[1]), float(r[2])) for r in rows]


def _first_write(writes: list[tuple[str, int, float]], obj: str,
                 after: float) -> tuple[int, float] | None:
    return next(((g, t) for o, g, t in writes if o == obj and t >= after), None)


def _first_agent(agent: dict[tuple[int, str, int], float], pk: int, msg: str,
                 generation: int) -> float:
    return min((t for (p, m, g), t in agent.items() if p == pk and m == msg and g >= generation),
               default=0.0)


ORDER_STEPS = ("placed", "desired written", "applied (agent)", "partition set (SM)",
               "converged report (agent)", "report stored (portal)", "active")
RELEASE_STEPS = ("release requested", "desired written", "node revoked (agent)",
                 "partition removed (SM)", "converged report (agent)",
                 "report stored (portal)", "ended")


@dataclass
class Sources:
    """Everything the stamps are read from, once per run."""

    writes: list[tuple[str, int, float]]  # desired-state audit rows
    agent: dict[tuple[int, str, int], float]  # the agents' own log lines
    stored: dict[int, list[float]]  # node pk -> when the portal stored each report
    ports: dict[int, list[str]]  # node pk -> port GUIDs
    sm: SubnetManager


def _stamps(steps: tuple[str, ...], start: float, end: float | None, node_pks: list[int],
            src: Sources) -> dict[str, float]:
    """One lease's way from ``start`` (the placed / releasing event) to ``end`` (active /
    ended) through the node desired state, the agents, the SM and the portal; 0 = not
    seen (e.g. an agent log line that never came)."""
    nodes = [(pk, w) for pk in node_pks
             if (w := _first_write(src.writes, str(pk), start - 0.001)) is not None]
    if not nodes or end is None:
        return {}
    written = max(t for _, (_, t) in nodes)
    applied = [_first_agent(src.agent, pk, "desired state applied", g) for pk, (g, _) in nodes]
    converged = [_first_agent(src.agent, pk, "converged", g) for pk, (g, _) in nodes]
    told = max(converged) if all(converged) else 0.0
    # each port's first table change after its node's state was written (and before
    # the node said it converged); none: the partition was already right
    until = told or end
    changed = [min((t for t in src.sm.changes.get(guid, []) if w <= t <= until), default=w)
               for pk, (_, w) in nodes for guid in src.ports.get(pk, [])]
    stored = [min((t for t in src.stored.get(pk, []) if t >= c), default=0.0)
              for (pk, _), c in zip(nodes, converged, strict=True) if c]
    return dict(zip(steps, (
        start, written, max(applied) if all(applied) else 0.0,
        max(changed, default=written), told,
        max(stored) if told and len(stored) == len(converged) and all(stored) else 0.0,
        end), strict=True))


def _stored_reports(stack: Stack) -> dict[int, list[float]]:
    rows = stack.query("""SELECT a.node_id, EXTRACT(EPOCH FROM r.received)
                          FROM fleet_agentreport r JOIN fleet_agent a ON a.id = r.agent_id
                          WHERE a.node_id IS NOT NULL ORDER BY r.received""")
    out: dict[int, list[float]] = {}
    for pk, t in rows:
        out.setdefault(int(pk), []).append(float(t))
    return out


def _breakdown(stack: Stack, hosts: list[NodeHost], sm: SubnetManager,
               leases: dict[str, dict[str, Any]], released: dict[str, float],
               verbose: bool) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per step, seconds after the order (its creation) and after the release request."""
    src = Sources(_desired_writes(stack), _agent_events(stack, hosts), _stored_reports(stack),
                  {h.pk: list(h.ports) for h in hosts}, sm)
    up: dict[str, list[float]] = {step: [] for step in ORDER_STEPS}
    down: dict[str, list[float]] = {step: [] for step in RELEASE_STEPS}
    for lease_id, lease in leases.items():
        timelines = [("order", up, lease["created"], _stamps(
            ORDER_STEPS, lease["placed"] or 0.0, lease["active"], lease["nodes"], src))]
        if released.get(lease_id) and lease["releasing"]:
            timelines.append(("release", down, released[lease_id], _stamps(
                RELEASE_STEPS, lease["releasing"], lease["ended"], lease["nodes"], src)))
        for what, steps, t0, stamps in timelines:
            if verbose:
                print(f"  lease {lease_id[:8]} {what:7s} nodes {lease['nodes']}: " + ", ".join(
                    f"{k} {v - t0:.2f}" if v else f"{k} -" for k, v in stamps.items()))
            for step, ts in stamps.items():
                if ts:
                    steps[step].append(ts - t0)
    return up, down


def _print_steps(title: str, steps: dict[str, list[float]]) -> None:
    print(f"{title} (p50 / p90 / p99 / max, n):")
    for step, values in steps.items():
        if values:
            print(f"  → {step:26s} {statistics.median(values):6.2f} / {_pct(values, 0.9):6.2f}"
                  f" / {_pct(values, 0.99):6.2f} / {max(values):6.2f}  n={len(values)}")
        else:
            print(f"  → {step:26s}      -  (not seen)")


def _run(stack: Stack, o: argparse.Namespace) -> int:
    base = stack.tmp / "hosts"
    ibsim = None
    if o.sm == "opensm" or (o.sm == "auto" and ibsim_available()):
        names = [r[0] for r in stack.query("SELECT hostname FROM inventory_node ORDER BY 1")]
        ibsim = Ibsim(stack, names, stack.tmp / "ibsim")
        ibsim.fabric_readers = o.fabric_readers
        ibsim.start()
        ibsim.adopt_guids()
    hosts = _hosts(stack, base)
    _start_agents(stack, hosts, base, ibsim)
    _wait_enrolled(stack, len(hosts) + 1)
    sm = _subnet_manager(stack, hosts, ibsim, o)
    sm.start()
    print(f"{len(hosts)} node agents + fabric agent enrolled and reporting", flush=True)
    churn = Churn(stack, o.orders, o.interval, o.hold, o.max_gpus or len(hosts) * 8 // 2,
                  o.timeout)
    churn.run()
    sm.stop.set()
    lease_ids, released = list(churn.leases), {k: v for k, v in churn.released.items() if v}
    leases = _lease_rows(stack, lease_ids)
    to_active = [r["active"] - r["created"] for r in leases.values() if r["active"]]
    to_ended = [leases[lid]["ended"] - t for lid, t in released.items() if leases[lid]["ended"]]
    print(f"orders: {o.orders}, active: {len(to_active)}, released: {len(released)}, "
          f"ended: {len(to_ended)}; reconciler every {o.reconcile_every:g} s; {sm.name_}"
          + (f", SM delay {o.sm_delay:g} s" if ibsim is None else ""))
    print(f"churn: an order every {o.interval:g} s, each lease released {o.hold:g} s after "
          f"it is active, at most {churn.max_gpus} GPUs held")
    print(f"order → active:  {_summary(to_active)}")
    print(f"release → ended: {_summary(to_ended)}")
    up, down = _breakdown(stack, hosts, sm, leases, released, o.verbose)
    _print_steps("breakdown, seconds after the order", up)
    _print_steps("release, seconds after the request", down)
    idle = _idle_commits(stack, o.idle_seconds)
    print(f"idle ({len(hosts)} node agents + fabric, no orders, {o.idle_seconds:g} s): "
          f"{idle:.1f} database commits/s")
    return 0 if len(to_active) == o.orders and len(to_ended) == len(released) else 1


def _subnet_manager(stack: Stack, hosts: list[NodeHost], ibsim: Ibsim | None,
                    o: argparse.Namespace) -> SubnetManager:
    if ibsim is None:
        return SubnetManager(stack, hosts, o.sm_delay)
    if o.sysfs_from == "report":
        return OpenSmBridge(stack, hosts, ibsim)
    return HcaTables(stack, hosts, ibsim)


def _idle_commits(stack: Stack, seconds: float) -> float:
    sql = "SELECT xact_commit FROM pg_stat_database WHERE datname = %s"
    time.sleep(5)  # let the last releases' reports and tasks drain
    with stack.connect() as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        before = conn.execute(sql, [stack.db_name]).fetchone()[0]
        time.sleep(seconds)
        conn.execute("SELECT pg_stat_clear_snapshot()")
        after = conn.execute(sql, [stack.db_name]).fetchone()[0]
    return float(after - before - 2) / seconds  # our own two statements


def run_on_stack(stack: Stack, began: float, body: Callable[[Stack, argparse.Namespace], int],
                 o: argparse.Namespace,
                 failures: tuple[type[Exception], ...] = (RuntimeError,)) -> int:
    """Start ``stack``, run a benchmark's ``body`` on it and stop it; prints when it was up
    and the total since ``began``. One of ``failures`` is a failed bench (1, with the
    stack's last log lines), not a crash."""
    with stack:
        print(f"stack up in {time.perf_counter() - began:.1f} s ({stack.base_url})", flush=True)
        try:
            return body(stack, o)
        except failures as exc:
            print(f"bench failed: {exc}\n{stack.logs(20)}")
            return 1
        finally:
            print(f"total {time.perf_counter() - began:.0f} s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="order → active with real agent processes")
    p.add_argument("--nodes", type=int, default=8)
    p.add_argument("--orders", type=int, default=40)
    p.add_argument("--interval", type=float, default=2.0, help="seconds between orders")
    p.add_argument("--hold", type=float, default=3.0,
                   help="seconds a lease is held after it is active, then released")
    p.add_argument("--max-gpus", type=int, default=0,
                   help="GPUs held at most at once (default: half the pool: no queueing)")
    p.add_argument("--sysfs-from", choices=("hca", "report"), default="hca",
                   help="OpenSM: a node's sysfs shows its HCA's table as the SM programs "
                   "it (hca, as the kernel does) or only once the fabric agent has "
                   "reported the map applied (report, this benchmark before ADR 0135)")
    p.add_argument("--sm", choices=("auto", "opensm", "fake"), default="auto",
                   help="auto: a real OpenSM on ibsim if installed, else the fake SM")
    p.add_argument("--sm-delay", type=float, default=0.25, help="fake SM only")
    p.add_argument("--reconcile-every", type=float, default=5.0)
    p.add_argument("--idle-seconds", type=float, default=20.0)
    p.add_argument("--timeout", type=float, default=240.0, help="for the whole churn")
    p.add_argument("--fabric-readers", type=int, default=IBSIM_READERS,
                   help="the fabric agent's read_back_parallel on ibsim (at most 4)")
    p.add_argument("--verbose", action="store_true", help="print every lease's timeline")
    p.add_argument("--db-name", default=os.environ.get("GPUPOOL_BENCH_DB_NAME", ""),
                   help="the throwaway database's name (default: the stack's own)")
    o = p.parse_args(argv)
    config = StackConfig(nodes=o.nodes, gpus_per_node=8, nodes_per_leaf=16, tenants=0,
                         big_tenants=2, workers=2, web_workers=1,
                         reconcile_every_s=o.reconcile_every,
                         env={"GPUPOOL_SIMULATED_AGENTS": "0"})
    began = time.perf_counter()
    stack = Stack(config)
    if o.db_name:
        stack.db_name = o.db_name
        stack.db_url = f"{server_url()}/{o.db_name}"
    return run_on_stack(stack, began, _run, o, failures=(RuntimeError, httpx.HTTPError))


if __name__ == "__main__":
    sys.exit(main())
