"""``make bench-healing`` (issue 27): faults in a 1,000-node pool at ~80 % leased, on the
production path.

PostgreSQL + a private Redis + uvicorn + 2 Celery workers + beat (``GPUPOOL_SIMULATED_AGENTS
=0``); the HTTP agent simulator (``python -m agents.sim.fleet``) for every node, speaking the
agent protocol, with faults injected into the running fleet through its control file
(``agents.sim.faults``); the real fabric agent (fake driver) applying the partition map.

The pool is filled to about ``--fill`` of its GPUs with leaf-placed 2-node gangs (8 GPUs a
node) and single-node leases of 4 and 8 GPUs; then a fault every ``--every`` seconds hits a
member of a random running lease, in the Llama 3 mix (GPU faults most, then network, then
hosts: XID 79, XID 48, a port down, an agent that dies). Printed: fault → fenced (node
faults: the fabric agent applied a map without the node's ports; GPU faults: the node
applied a grant without the GPU) and fault → replacement active (``LeaseFault.replaced_at``)
p50/p99; the faults replaced, degraded; then, once every lease is released and metered:
GPU-seconds billed on failed hardware (what the fault intervals say minus what metering
left unbilled), the tenant's availability and the SLA credit it would get, double
bookings (the stack's invariants) and failed parts offered before validation.

    python -m tests.bench.healing_fleet --nodes 1000
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import httpx

from tests.bench.http_fleet import HttpFleet
from tests.bench.real_agents import _pct, _summary, start_fabric_agent
from tests.portal.leasing.stack import PYTHON, ROOT, Stack, StackConfig, check_invariants

TENANT = "b0"
HUNDRED = Decimal(100)
# the Llama 3 run's interruptions (§3.3.4): GPU 58.7 % (faulty GPU 30.1, HBM3 17.2, …),
# network 8.4 %, host and the rest; here: what a node agent can tell apart
MIX = (("xid79", 0.35), ("xid48", 0.35), ("port_down", 0.15), ("silence", 0.15))
NODE_FAULTS = ("xid79", "port_down", "silence")


@dataclass
class Fault:
    kind: str
    lease: str
    host: str
    node_pk: int
    gpu: int
    guids: list[str]
    at: float
    fenced: float | None = None


@dataclass
class Run:
    stack: Stack
    control: Path
    faults: list[Fault] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)




def _order(stack: Stack, body: dict[str, Any], tries: int = 3) -> str | None:
    """POST one order; a timed-out POST is sent again with the same Idempotency-Key (the
    portal answers the first one's order, never a second)."""
    key = str(uuid.uuid4())
    for attempt in range(tries):
        try:
            with stack.client(timeout=60) as c:
                r = c.post("/api/v1/orders",
                           json={"models": ["H100"], "duration_hours": "2", **body},
                           headers={**stack.auth(TENANT), "Idempotency-Key": key})
        except httpx.TimeoutException:
            if attempt == tries - 1:
                raise
            continue
        return str(r.json()["id"]) if r.status_code in (200, 201) else None
    return None


def _fill(stack: Stack, nodes: int, fill: float) -> list[str]:
    """Gangs (2 × 8, one leaf), 8-GPU and 4-GPU leases until ``fill`` of the GPUs."""
    rng, target, bodies, held = random.Random(27), nodes * 8 * fill, [], 0.0
    while held < target:
        roll = rng.random()
        if roll < 0.25:
            bodies.append({"gpu_count": 8, "nodes": 2, "locality": "leaf",
                           "locality_required": True})
            held += 16
        else:
            gpus = 8 if roll < 0.7 else 4
            bodies.append({"gpu_count": gpus})
            held += gpus
    with ThreadPoolExecutor(4) as pool:
        ids = [i for i in pool.map(lambda b: _order(stack, b), bodies) if i]
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        states = stack.states(ids)
        if sum(s == "active" for s in states.values()) >= 0.98 * len(ids):
            break
        time.sleep(2)
    return [i for i, s in stack.states(ids).items() if s == "active"]


def _member(stack: Stack, lease: str) -> tuple[str, int, int, list[str]] | None:
    rows = stack.query("""SELECT n.hostname, n.id, g.index FROM leasing_allocation a
                          JOIN inventory_gpu g ON g.id = a.gpu_id
                          JOIN inventory_node n ON n.id = a.node_id
                          WHERE a.live AND a.lease_id::text = %s AND n.service = 'in_service'
                          ORDER BY 1, 3 LIMIT 1""", [lease])
    if not rows:
        return None
    host, pk, gpu = rows[0]
    guids = [r[0] for r in stack.query("SELECT port_guid FROM inventory_hcaport "
                                       "WHERE node_id = %s", [pk])]
    return str(host), int(pk), int(gpu), guids


def _line(kind: str, host: str, gpu: int) -> dict[str, Any]:
    if kind == "silence":
        return {"host": host, "silent": True}
    if kind == "port_down":
        return {"host": host, "port_down": ["mlx5_0", 1]}
    return {"host": host, "gpu": gpu, "xid": 79 if kind == "xid79" else 48}


def _inject(run: Run, leases: list[str], rng: random.Random) -> Fault | None:
    kinds, weights = zip(*MIX, strict=True)
    kind = rng.choices(kinds, weights)[0]
    busy = {f.host for f in run.faults}
    for lease in rng.sample(leases, len(leases)):
        member = _member(run.stack, lease)
        if member is None or member[0] in busy:
            continue
        host, pk, gpu, guids = member
        fault = Fault(kind, lease, host, pk, gpu, guids, time.time())
        with run.control.open("a") as out:
            out.write(json.dumps(_line(kind, host, gpu)) + "\n")
        return fault
    return None


def _watch(run: Run) -> None:
    """Stamp each fault's fence: the map applied without the node's ports, or the node's
    grant applied without the GPU."""
    with run.stack.connect() as conn:
        while not run.stop.wait(0.25):
            with run.lock:
                pending = [f for f in run.faults if f.fenced is None]
            if not pending:
                continue
            now = time.time()
            fabric = conn.execute("""SELECT d.generation, d.document::text, o.generation_applied
                FROM fleet_fabricdesiredstate d JOIN fleet_fabricobservedstate o
                ON o.name = d.name""").fetchone()
            for f in pending:
                if f.kind in NODE_FAULTS:
                    if fabric and fabric[2] >= fabric[0] and not any(
                            g in fabric[1] for g in f.guids):
                        f.fenced = now
                elif _gpu_fenced(conn, f):
                    f.fenced = now


def _gpu_fenced(conn: Any, f: Fault) -> bool:
    row = conn.execute("""SELECT d.generation, d.document, o.generation_applied
                          FROM fleet_nodedesiredstate d JOIN fleet_nodeobservedstate o
                          ON o.node_id = d.node_id WHERE d.node_id = %s""",
                       [f.node_pk]).fetchone()
    if row is None:
        return False
    tag = f"ls_{uuid.UUID(f.lease).hex[:16]}"
    grants = [g for g in row[1].get("access_grants", []) if g.get("lease_id") == tag]
    return row[2] >= row[0] and (not grants or f.gpu not in grants[0]["gpu_indices"])


def _replaced(stack: Stack, faults: list[Fault]) -> dict[int, float]:
    out: dict[int, float] = {}
    for i, f in enumerate(faults):
        rows = stack.query("""SELECT EXTRACT(EPOCH FROM replaced_at) FROM leasing_leasefault
                              WHERE lease_id::text = %s AND node_id = %s
                                AND replaced_at IS NOT NULL""", [f.lease, f.node_pk])
        if rows:
            out[i] = float(rows[0][0]) - f.at
    return out


METER = """
from portal.billing.metering import meter_leases
from portal.core import clock
print(meter_leases(until=clock.now()).as_dict())
"""


def _meter(stack: Stack) -> None:
    subprocess.run([PYTHON, "-m", "django", "shell", "-c", METER], cwd=ROOT, env=stack.env(),
                   capture_output=True, text=True, timeout=900, check=True)


def _failed_truth(stack: Stack) -> Decimal:
    """GPU-seconds on failed hardware, from the fault intervals alone: from the fault (or
    the lease's start) to the replacement (or the lease's end)."""
    return Decimal(str(stack.query("""SELECT COALESCE(SUM(f.gpus * EXTRACT(EPOCH FROM
            LEAST(COALESCE(f.replaced_at, l.ended_at, l.end_at), l.ended_at, l.end_at)
            - GREATEST(f.fault_at, l.active_at))), 0)
        FROM leasing_leasefault f JOIN leasing_lease l ON l.id = f.lease_id
        WHERE l.active_at IS NOT NULL""")[0][0]))


def _billed_on_failed(stack: Stack) -> tuple[float, float]:
    """(GPU-seconds the fault intervals say were on failed hardware, minus what metering
    left unbilled: ≈ 0 when nothing failed was billed; the unbilled total)."""
    expected = _failed_truth(stack)
    recorded = stack.query("SELECT COALESCE(SUM(failed_gpu_seconds), 0) "
                           "FROM billing_usagerecord")[0][0]
    return float(expected) - float(recorded), float(recorded)


# the contract the tenant is given before its invoice closes: a 99.95 % promise with tiers
SLA_PROMISE = Decimal("99.95")
SLA_TIERS = ((Decimal("99.95"), Decimal(10)), (Decimal("99.5"), Decimal(25)),
             (Decimal("99.0"), Decimal(50)), (Decimal("95.0"), Decimal(100)))

# Closes the tenant's month on the production path (``invoice_finalize``, which settles the
# SLA credit), with the clock moved past the month's end; prints the credit line and its
# FOCUS row as JSON.
CLOSE = """
import json
from datetime import timedelta
from portal.billing import focus, selectors, services
from portal.billing.models import CreditLine, TenantContract
from portal.core import clock
from portal.tenants.models import Tenant
tenant = Tenant.objects.get(slug=%(tenant)r)
month = selectors.month_bounds(clock.now().date().replace(day=1))
start, end = month
TenantContract.objects.create(tenant=tenant, effective_from=start, reference="bench-healing",
                              availability_sla=%(promise)r, sla_credit_tiers=%(tiers)s)
clock.freeze(end + timedelta(minutes=1))
invoice = services.invoice_finalize(actor=None, tenant=tenant, month=start.date())
line = CreditLine.objects.filter(tenant=tenant, kind="sla").values(*focus.CREDIT_FIELDS).first()
row = focus.credit_row(line) if line else None
print("CLOSE " + json.dumps({"month": start.date().isoformat(), "status": invoice.status,
    "credit": str(line["amount"]) if line else "0.00",
    "focus": row and {"ChargeCategory": row["ChargeCategory"], "BilledCost": str(row["BilledCost"]),
                      "x_CreditKind": row["Tags"]["x_CreditKind"]}}))
"""


@dataclass(frozen=True)
class Credit:
    availability: Decimal
    expected: Decimal
    actual: Decimal | None  # None: the month did not close
    focus: dict[str, str] | None

    @property
    def exact(self) -> bool:
        row_ok = self.expected == 0 or (
            self.focus is not None and self.focus["ChargeCategory"] == "Credit"
            and Decimal(self.focus["BilledCost"]) == -self.expected
            and self.focus["x_CreditKind"] == "sla")
        return self.actual is not None and self.actual == -self.expected and row_ok


def _expected_credit(stack: Stack, failed_truth: Decimal) -> tuple[Decimal, Decimal]:
    """(availability %, the credit) from first principles: the GPU-seconds the fault
    intervals say were on failed hardware against all leased GPU-seconds, the tier that
    availability falls in, of the month's usage charge less its whole-lease failure
    credits, rounded once to the cent (half up)."""
    used, cost = stack.query(f"""SELECT COALESCE(SUM(u.gpus * u.seconds), 0),
            COALESCE(SUM(u.cost), 0) FROM billing_usagerecord u
        JOIN tenants_tenant t ON t.id = u.tenant_id WHERE t.slug = '{TENANT}'""")[0]
    failure = stack.query(f"""SELECT COALESCE(SUM(c.amount), 0) FROM billing_creditline c
        JOIN tenants_tenant t ON t.id = c.tenant_id
        WHERE t.slug = '{TENANT}' AND c.kind = 'failure'""")[0][0]
    used = Decimal(str(used))
    if not used:
        return HUNDRED, Decimal("0.00")
    percent = ((used - failed_truth) * HUNDRED / used).quantize(Decimal("0.0001"))
    share = max((c for below, c in SLA_TIERS if percent < below), default=Decimal(0))
    net = max(Decimal(str(cost)) + Decimal(str(failure)), Decimal(0))
    return percent, (net * share / HUNDRED).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def _close_month(stack: Stack, failed_truth: Decimal) -> Credit:
    tiers = json.dumps([[str(b), str(c)] for b, c in SLA_TIERS])
    script = CLOSE % {"tenant": TENANT, "promise": str(SLA_PROMISE), "tiers": tiers}
    done = subprocess.run([PYTHON, "-m", "django", "shell", "-c", script], cwd=ROOT,
                          env=stack.env(), capture_output=True, text=True, timeout=900)
    percent, expected = _expected_credit(stack, failed_truth)
    if done.returncode:
        print(f"the month did not close: {done.stderr[-600:]}")
        return Credit(percent, expected, None, None)
    closed = json.loads(next(x for x in done.stdout.splitlines() if x.startswith("CLOSE "))[6:])
    return Credit(percent, expected, Decimal(closed["credit"]), closed["focus"])


def _offered_before_validation(stack: Stack) -> int:
    """Slots on a failed part handed to any lease after its fence (none may be: the part
    is out of service until validated): the failed GPUs, or any GPU of a node that went
    to repair as a whole."""
    return int(stack.query("""SELECT count(*) FROM leasing_allocation a
        JOIN inventory_gpu g ON g.id = a.gpu_id
        JOIN leasing_leasefault f ON f.node_id = a.node_id
        WHERE a.start_at >= f.fenced_at
          AND (f.gpu_indexes @> to_jsonb(g.index)
               OR EXISTS (SELECT 1 FROM fleet_serviceevent e WHERE e.node_id = f.node_id
                          AND e.gpu_id IS NULL AND e.to_state = 'out_of_service'
                          AND e.created <= f.fenced_at))""")[0][0])


def run(stack: Stack, o: argparse.Namespace) -> int:
    control = stack.tmp / "faults.jsonl"
    fleet = HttpFleet(stack, o.nodes, o.report_interval, o.apply_delay, control=control)
    fleet.start()
    start_fabric_agent(stack, stack.tmp / "hosts", None, stack.env())
    fleet.wait_enrolled(timeout=max(900.0, o.nodes * 1.0))
    print(f"{o.nodes} simulated agents + the fabric agent reporting", flush=True)
    leases = _fill(stack, o.nodes, o.fill)
    held = stack.query("SELECT count(*) / 8.0 FROM leasing_allocation WHERE live")[0][0]
    print(f"{len(leases)} leases active, {float(held):.0f} of {o.nodes * 8} GPUs leased "
          f"({float(held) / (o.nodes * 8):.0%})", flush=True)
    r = Run(stack, control)
    watcher = threading.Thread(target=_watch, args=(r,), daemon=True)
    watcher.start()
    rng = random.Random(42)
    for _ in range(o.faults):
        fault = _inject(r, leases, rng)
        if fault is not None:
            with r.lock:
                r.faults.append(fault)
        time.sleep(o.every)
    time.sleep(o.drain)
    r.stop.set()
    return _report(stack, r, leases, o)


def silence_threshold(stack: Stack, nodes: int) -> int:
    """The unreachable threshold the stack holds a fleet of ``nodes`` agents to, asked of
    the portal itself (``intervals.for_fleet``: max(``GPUPOOL_AGENT_UNREACHABLE_AFTER_S``,
    3 × the report interval the fleet is told))."""
    code = ("from portal.fleet.intervals import for_fleet; "
            f"print('THRESHOLD', for_fleet({nodes}).unreachable_after_s)")
    out = subprocess.run([PYTHON, "-m", "django", "shell", "-c", code], cwd=ROOT,
                         env=stack.env(), capture_output=True, text=True, timeout=120,
                         check=True).stdout
    return int(next(x for x in out.splitlines() if x.startswith("THRESHOLD "))[10:])


def _past(values: list[float], threshold: int) -> str:
    """The worst time past the threshold (an upper bound: the node's last report came at or
    before its death, so the threshold was crossed at or before death + threshold)."""
    return f"{max(values) - threshold:.2f}" if values else "-"


def _report(stack: Stack, r: Run, leases: list[str], o: argparse.Namespace) -> int:
    fenced = [f.fenced - f.at for f in r.faults if f.fenced is not None
              and f.kind != "silence"]
    fenced_silent = [f.fenced - f.at for f in r.faults if f.fenced is not None
                     and f.kind == "silence"]
    replaced = _replaced(stack, r.faults)
    degraded = int(stack.query("SELECT count(*) FROM leasing_lease "
                               "WHERE condition = 'degraded'")[0][0])
    kinds = {k: sum(f.kind == k for f in r.faults) for k, _ in MIX}
    print(f"faults injected: {len(r.faults)} ({', '.join(f'{k} {n}' for k, n in kinds.items())}),"
          f" one every {o.every:g} s")
    threshold = silence_threshold(stack, o.nodes)
    print(f"fault → fenced:              {_summary(fenced)}")
    quick = [v for i, v in replaced.items() if r.faults[i].kind != "silence"]
    silent = [v for i, v in replaced.items() if r.faults[i].kind == "silence"]
    print(f"fault → replacement active:  {_summary(quick)}")
    print(f"agent death (threshold in force at {o.nodes} agents: {threshold} s: the larger of "
          f"--unreachable-after and 3 reports at the fleet's interval): fenced {_summary(fenced_silent)}, "
          f"replacement active {_summary(silent)} after the death; at most "
          f"{_past(fenced_silent, threshold)} / {_past(silent, threshold)} s past the threshold")
    print(f"replaced {len(replaced)}, degraded leases {degraded} (no replacement that keeps "
          f"the lease's placement was free), not fenced "
          f"{len(r.faults) - len(fenced) - len(fenced_silent)}")
    # every lease still open, the fill's stragglers and replacements included: the month
    # closes only once all its usage has settled
    settled = ("ended", "expired", "failed", "cancelled", "rejected", "preempted")
    open_leases = [i for i, s in stack.states().items() if s not in settled]
    with stack.client() as c:
        for lease in open_leases:
            c.post(f"/api/v1/leases/{lease}/release", json={"reason": "bench"},
                   headers=stack.auth(TENANT))
    stack.wait_settled(timeout=300, ok=settled)
    _meter(stack)
    billed_failed, unbilled = _billed_on_failed(stack)
    print(f"GPU-seconds billed on failed hardware: {billed_failed:.1f} "
          f"(unbilled by metering: {unbilled:.0f})")
    credit = _close_month(stack, _failed_truth(stack))
    print(f"availability {credit.availability} % against a {SLA_PROMISE} % SLA: credit "
          f"{'none' if credit.actual is None else f'{-credit.actual:.2f}'}, expected {credit.expected:.2f} "
          f"({'exact to the cent' if credit.exact else 'NOT exact'}; FOCUS row "
          f"{credit.focus or 'none'})")
    offered = _offered_before_validation(stack)
    problems = check_invariants(stack)
    shown = "; ".join(p[:400] for p in problems[:3]) + (
        f" … ({len(problems)} in all)" if len(problems) > 3 else "")
    print(f"double bookings / invariants: {shown or 'none'}; failed parts offered "
          f"before validation: {offered}")
    p99_fenced = _pct(fenced, 0.99) if fenced else float("inf")
    p99_replaced = _pct(quick, 0.99) if quick else float("inf")
    ok = (p99_fenced <= 5 and p99_replaced <= 30 and abs(billed_failed) < 1 and not problems
          and offered == 0 and credit.exact)
    print(f"targets (fenced p99 ≤ 5 s, replaced p99 ≤ 30 s, 0 billed on failed hardware, 0 "
          f"double bookings, 0 offered before validation, credit exact to the cent): {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="faults in a running 1,000-node pool")
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--fill", type=float, default=0.8)
    p.add_argument("--faults", type=int, default=40)
    p.add_argument("--every", type=float, default=3.0, help="seconds between faults")
    p.add_argument("--drain", type=float, default=60.0, help="wait after the last fault")
    p.add_argument("--report-interval", type=float, default=0.0,
                   help="simulated agents' report interval (0: what the portal asks)")
    p.add_argument("--apply-delay", type=float, default=0.2)
    p.add_argument("--unreachable-after", type=float, default=30.0)
    o = p.parse_args(argv)
    config = StackConfig(nodes=o.nodes, gpus_per_node=8, nodes_per_leaf=16, tenants=0,
                         big_tenants=1, workers=2, web_workers=2, reconcile_every_s=5.0,
                         env={"GPUPOOL_SIMULATED_AGENTS": "0",
                              "GPUPOOL_AGENT_UNREACHABLE_AFTER_S": f"{o.unreachable_after:g}"})
    began = time.perf_counter()
    with Stack(config) as stack:
        print(f"stack up in {time.perf_counter() - began:.1f} s", flush=True)
        try:
            return run(stack, o)
        finally:
            print(f"total {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
