"""Issues 27 and 28 together on the production path: a fault on a MIG-mode GPU fails the
MIG instances on it, with REAL agents.

The stack of ``tests.bench.healing`` (PostgreSQL, a private Redis, uvicorn, Celery workers
and beat, ``GPUPOOL_SIMULATED_AGENTS=0``), ``--nodes`` real ``python -m agents node``
processes whose fake NVML (h100x8) creates and destroys the MIG instances the portal asks
for and takes its faults from a control file, and the real fabric agent. GPUs 0 and 1 of
every node are offered for MIG (``mig_mode=dynamic``).

Per fault, two tenants each order one ``1g.10gb`` through the API; once both are active,
the GPU of the first tenant's instance fails from outside the running agent (a line
appended to its control file):

- ``xid48``: double-bit ECC — a GPU fault: the GPU leaves service, its instances get new
  ones on another GPU of the same node;
- ``xid79``: fallen off the bus — the policy reboots the node: it leaves service, the
  instances move to another node.

Checked per fault: each lease with an instance there is *fenced* (its node's applied grant
no longer lists an instance on the failed GPU), *healed* (``LeaseFault.replaced_at``: a new
instance on another GPU, reported by the agent with its own ``MIG-…`` UUID, the lease
active and healthy again), a ``healed`` event names the replacement, and the failed part is
offered to nobody (out of service, in no live allocation or instance). Then the stack's
invariants.

    python -m tests.bench.healing_mig --nodes 2
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from tests.bench.healing import _inject, _start, _wait, applied_node_document, exit_status
from tests.bench.real_agents import (
    TERMINAL_STATES,
    NodeHost,
    SubnetManager,
    _hosts,
    _wait_enrolled,
    run_on_stack,
)
from tests.portal.leasing.stack import Stack, StackConfig

FAULTS = ("xid48", "xid79")
NODE_FAULTS = ("xid79",)  # the policy's action for XID 79 takes the node out
TENANTS = ("b0", "b1")
PROFILE = "1g.10gb"
MIG_GPUS = (0, 1)


@dataclass
class Outcome:
    fault: str
    healed: int = 0  # leases on the failed GPU that got an active replacement instance
    on_failed: int = 0  # leases whose instance was on the failed GPU
    fenced_s: float | None = None
    replaced_s: float | None = None
    event: bool = False
    offered: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (self.on_failed > 0 and self.healed == self.on_failed and self.event
                and not self.offered and self.fenced_s is not None
                and self.replaced_s is not None and self.replaced_s <= 60 and not self.notes)


def _order(stack: Stack, tenant: str) -> str:
    with stack.client() as c:
        r = c.post("/api/v1/orders", json={
            "models": ["H100"], "mig_profile": PROFILE, "gpu_count": 1,
            "duration_hours": "1", "name": "mig-healing"},
            headers={**stack.auth(tenant), "Idempotency-Key": str(uuid.uuid4())})
    r.raise_for_status()
    return str(r.json()["id"])


def _instances(stack: Stack, lease_id: str) -> list[tuple[str, int, int, str]]:
    """(hostname, GPU index, start slot, MIG UUID) of the lease's live instances."""
    return [(h, int(i), int(s), u) for h, i, s, u in stack.query(
        """SELECT n.hostname, g.index, m.start, m.uuid FROM leasing_miginstance m
           JOIN leasing_allocation a ON a.id = m.allocation_id
           JOIN inventory_gpu g ON g.id = m.gpu_id JOIN inventory_node n ON n.id = g.node_id
           WHERE a.live AND m.lease_id::text = %s ORDER BY 1, 2, 3""", [lease_id])]


def _active_with_uuids(stack: Stack, ids: list[str]) -> bool:
    states = stack.states(ids)
    return all(states.get(i) == "active" for i in ids) and all(
        (inst := _instances(stack, i)) and all(u.startswith("MIG-") for *_, u in inst)
        for i in ids)


def _fenced(stack: Stack, host: NodeHost, gpu: int, lease_ids: list[str]) -> bool:
    """The victim node's agent applied a grant with no instance of these leases on ``gpu``."""
    doc = applied_node_document(stack, host)
    if doc is None:
        return False
    tags = {f"ls_{uuid.UUID(i).hex[:16]}" for i in lease_ids}
    on_gpu = [d for g in doc.get("access_grants", []) if g.get("lease_id") in tags
              for d in g.get("mig_devices", []) if d["gpu_index"] == gpu]
    return not on_gpu


def _replaced(stack: Stack, lease_ids: list[str]) -> list[float]:
    rows = stack.query("SELECT EXTRACT(EPOCH FROM replaced_at) FROM leasing_leasefault "
                       "WHERE lease_id::text = ANY(%s) AND replaced_at IS NOT NULL",
                       [lease_ids])
    return [float(r[0]) for r in rows] if len(rows) == len(lease_ids) else []


def _healed_event(stack: Stack, lease_id: str, new: tuple[str, int]) -> bool:
    """A ``healed`` event whose data names the new instance's node and GPU."""
    for (data,) in stack.query("SELECT data FROM leasing_leaseevent WHERE lease_id::text = %s"
                               " AND kind = 'healed' AND reason LIKE %s", [lease_id, "%→%"]):
        for r in data.get("replaced", []):
            rep = r.get("replacement", {})
            if rep.get("node") == new[0] and new[1] in rep.get("gpu_indexes", []) and any(
                    m[0] == new[1] and m[1] == PROFILE for m in rep.get("mig", [])):
                return True
    return False


def _offered(stack: Stack, host: NodeHost, gpu: int, fault: str) -> bool:
    """Is the failed part in service, or in anyone's live allocation or instance?"""
    live = stack.query("""SELECT count(*) FROM leasing_allocation a
                          JOIN inventory_gpu g ON g.id = a.gpu_id
                          WHERE a.live AND g.node_id = %s AND g.index = %s""", [host.pk, gpu])
    if fault in NODE_FAULTS:
        service = stack.query("SELECT service FROM inventory_node WHERE id = %s", [host.pk])
    else:
        service = stack.query("SELECT service FROM inventory_gpu WHERE node_id = %s "
                              "AND index = %s", [host.pk, gpu])
    return bool(live[0][0]) or service[0][0] == "in_service"


def _scenario(stack: Stack, fault: str, hosts: dict[str, NodeHost], procs: dict[str, Any],
              timeout: float) -> Outcome:
    out = Outcome(fault)
    ids = [_order(stack, t) for t in TENANTS]
    if not _wait(lambda: _active_with_uuids(stack, ids), 90, 0.25):
        out.notes.append(f"leases never active with MIG UUIDs ({stack.states(ids)})")
        return out
    before = {i: _instances(stack, i) for i in ids}
    victim_name, gpu = before[ids[0]][0][0], before[ids[0]][0][1]
    victim = hosts[victim_name]
    on_failed = [i for i in ids if any(h == victim_name and g == gpu for h, g, *_ in before[i])]
    if fault in NODE_FAULTS:
        on_failed = [i for i in ids if any(h == victim_name for h, *_ in before[i])]
    out.on_failed = len(on_failed)
    t0 = time.time()
    _inject(fault, victim, gpu, procs)
    fenced = _wait(lambda: _fenced(stack, victim, gpu, on_failed), timeout, 0.05)
    out.fenced_s = time.time() - t0 if fenced else None
    replaced = _wait(lambda: _replaced(stack, on_failed), timeout)
    out.replaced_s = max(replaced) - t0 if replaced else None
    # active and whole again (Condition.HEALTHY is stored as '')
    healthy = _wait(lambda: _active_with_uuids(stack, on_failed) and all(
        c == "" for (c,) in stack.query(
            "SELECT condition FROM leasing_lease WHERE id::text = ANY(%s)", [on_failed])),
        timeout, 0.25)
    events = []
    for lease_id in on_failed:
        now = _instances(stack, lease_id)
        old_uuids = {u for *_, u in before[lease_id]}
        moved = [(h, g, u) for h, g, _, u in now
                 if (h, g) != (victim_name, gpu) and u not in old_uuids]
        if fault in NODE_FAULTS:
            moved = [m for m in moved if m[0] != victim_name]
        if healthy and len(moved) == len(now) == len(before[lease_id]):
            out.healed += 1
            events.append(_healed_event(stack, lease_id, (moved[0][0], moved[0][1])))
        else:
            out.notes.append(f"{lease_id[:8]}: now {now}, was {before[lease_id]}")
    out.event = bool(events) and all(events)
    out.offered = _offered(stack, victim, gpu, fault)
    for tenant, lease_id in zip(TENANTS, ids, strict=True):
        with stack.client() as c:
            c.post(f"/api/v1/leases/{lease_id}/release", json={"reason": "bench"},
                   headers=stack.auth(tenant))
    stack.wait_settled(ids, timeout=90, ok=TERMINAL_STATES)
    return out


def _report(outcomes: list[Outcome]) -> bool:
    print(f"{'fault':8s} {'on it':>5s} {'healed':>6s} {'fenced':>8s} {'replaced':>9s}  "
          "event  offered")
    for o in outcomes:
        fenced = f"{o.fenced_s:.2f} s" if o.fenced_s is not None else "never"
        replaced = f"{o.replaced_s:.2f} s" if o.replaced_s is not None else "never"
        print(f"{o.fault:8s} {o.on_failed:5d} {o.healed:6d} {fenced:>8s} {replaced:>9s}  "
              f"{'yes' if o.event else 'no ':3s}    {'YES' if o.offered else 'no'}  "
              f"{'; '.join(o.notes)}")
    ok = bool(outcomes) and all(o.ok for o in outcomes)
    print(f"target: every MIG instance on the failed GPU replaced on another, active within "
          f"60 s of the fault, failed part offered to nobody — {'met' if ok else 'NOT met'}")
    return ok


def run(stack: Stack, o: argparse.Namespace) -> int:
    hosts = _hosts(stack, stack.tmp / "hosts")
    with stack.connect() as conn:
        conn.execute("UPDATE inventory_gpu SET mig_mode = 'dynamic' WHERE index = ANY(%s)",
                     [list(MIG_GPUS)])
    procs = _start(stack, hosts, stack.tmp / "hosts", None)
    _wait_enrolled(stack, len(hosts) + 1)
    sm = SubnetManager(stack, hosts, 0.25)
    sm.start()
    print(f"{len(hosts)} node agents + fabric agent enrolled and reporting; {sm.name_}",
          flush=True)
    by_name = {h.hostname: h for h in hosts}
    outcomes = [_scenario(stack, fault, by_name, procs, o.timeout) for fault in o.faults]
    time.sleep(2)  # the last teardown reports
    sm.stop.set()
    return exit_status(stack, _report(outcomes))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="a fault on a MIG-mode GPU, real agents")
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--faults", nargs="+", choices=FAULTS, default=list(FAULTS))
    p.add_argument("--timeout", type=float, default=90.0, help="per fault")
    o = p.parse_args(argv)
    config = StackConfig(nodes=o.nodes, gpus_per_node=8, nodes_per_leaf=16, tenants=0,
                         big_tenants=len(TENANTS), workers=2, web_workers=1,
                         reconcile_every_s=5.0, env={"GPUPOOL_SIMULATED_AGENTS": "0"})
    began = time.perf_counter()
    return run_on_stack(Stack(config), began, run, o)


if __name__ == "__main__":
    sys.exit(main())
