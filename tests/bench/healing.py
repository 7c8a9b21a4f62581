"""Issue 27 on the production path: hardware fails inside a running lease, with REAL agents.

PostgreSQL + a private Redis + uvicorn + 2 Celery workers + beat (``GPUPOOL_SIMULATED_AGENTS
=0``), ``--nodes`` real ``python -m agents node`` processes over HTTP on fake sysfs/procfs
and a fake NVML whose faults come from a control file (``--fake-faults``), and the real
``python -m agents fabric`` (OpenSM on ibsim where installed, else the fake driver).

For each fault a 2-node leaf-placed lease (4 GPUs per node) is made active, then one of its
member nodes fails, from outside the running agent:

- ``silence``: the agent process is stopped (SIGSTOP) — the agent death of a crashed host;
- ``port_down``: its HCA port goes DOWN in its sysfs (as the kernel shows a link loss);
- ``xid79``: a GPU falls off the bus (XID 79, appended to the fake NVML's control file);
- ``xid48``: a GPU reports a double-bit ECC error (XID 48).

Printed per fault, in seconds after the fault: *fenced* — the fabric agent has applied a
partition map without the failed node's ports (node faults), or the node's agent has
applied a grant without the failed GPU (GPU fault); *replacement active* — the portal
recorded the replacement converged (``LeaseFault.replaced_at``); whether the tenant got an
event naming the replacement; whether the failed part was offered to anyone. Then the
stack's invariants (no GPU slot in two live allocations).

    python -m tests.bench.healing --nodes 8     # make bench-healing-agents
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.config import NODE_DEFAULTS
from tests.bench.real_agents import (
    TERMINAL_STATES,
    Ibsim,
    NodeHost,
    SubnetManager,
    _hosts,
    _subnet_manager,
    _tokens,
    _wait_enrolled,
    ibsim_available,
    run_on_stack,
    start_fabric_agent,
)
from tests.portal.leasing.stack import PYTHON, Stack, StackConfig, check_invariants

FAULTS = ("silence", "port_down", "xid79", "xid48")
NODE_FAULTS = ("silence", "port_down", "xid79")
TENANT = "b0"


@dataclass
class Outcome:
    fault: str
    fenced_s: float | None = None
    replaced_s: float | None = None
    event: bool = False
    offered: bool = False
    notes: list[str] = field(default_factory=list)


def _config(host: NodeHost, url: str, token: str) -> Path:
    root = host.root
    faults = (f'fake_faults = "{root / "faults.jsonl"}"\n'
              if "fake_faults" in NODE_DEFAULTS["hardware"] else "")
    text = (f'[portal]\nurl = "{url}"\nbootstrap_token = "{token}"\n'
            f'[agent]\nstate_dir = "{root / "state"}"\n'
            f'[hardware]\nsysfs_root = "{root / "sys"}"\nproc_root = "{root / "proc"}"\n'
            f'fake_gpus = "h100x8"\n{faults}access_root = "{root / "access"}"\n'
            '[metrics]\nlisten = ""\n[log]\nlevel = "INFO"\n')
    (root / "faults.jsonl").touch()
    path = root / "agent.toml"
    path.write_text(text)
    return path


def _start(stack: Stack, hosts: list[NodeHost], base: Path, ibsim: Ibsim | None) -> dict[str, Any]:
    env = {**(ibsim.env if ibsim else stack.env()), "GPUPOOL_AGENT_PORTAL_TIMEOUT_S": "40"}
    pattern = os.path.commonprefix([h.hostname for h in hosts]).rstrip("0123456789") + "*"
    procs = {}
    for host, token in zip(hosts, _tokens(stack, "node", len(hosts), pattern), strict=True):
        cfg = _config(host, stack.base_url, token)
        procs[host.hostname] = stack._spawn(f"agent-{host.hostname}", [
            PYTHON, "-m", "agents", "node", "--config", str(cfg)], env)
    start_fabric_agent(stack, base, ibsim, env)
    return procs


def _order(stack: Stack) -> str:
    with stack.client() as c:
        r = c.post("/api/v1/orders", json={
            "models": ["H100"], "gpu_count": 4, "nodes": 2, "locality": "leaf",
            "locality_required": True, "duration_hours": "1", "name": "healing-bench"},
            headers={**stack.auth(TENANT), "Idempotency-Key": str(uuid.uuid4())})
    r.raise_for_status()
    return str(r.json()["id"])


def _wait(predicate: Any, timeout: float, step: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return None


def _members(stack: Stack, lease_id: str) -> list[tuple[str, int]]:
    """(hostname, GPU index) of the lease's live allocations."""
    return [(h, int(i)) for h, i in stack.query(
        """SELECT DISTINCT n.hostname, g.index FROM leasing_allocation a
           JOIN inventory_gpu g ON g.id = a.gpu_id JOIN inventory_node n ON n.id = a.node_id
           WHERE a.live AND a.lease_id::text = %s ORDER BY 1, 2""", [lease_id])]


def _inject(fault: str, host: NodeHost, gpu: int, procs: dict[str, Any]) -> None:
    if fault == "silence":
        os.killpg(procs[host.hostname].pid, signal.SIGSTOP)
    elif fault == "port_down":
        device, port = next(iter(host.ports.values()))
        ports = host.root / "sys" / "class" / "infiniband" / device / "ports" / str(port)
        (ports / "state").write_text("1: DOWN\n")
        (ports / "phys_state").write_text("3: Disabled\n")
        counter = ports / "counters" / "link_downed"
        counter.write_text(f"{int(counter.read_text() or 0) + 1}\n")
    else:
        xid = 79 if fault == "xid79" else 48
        with (host.root / "faults.jsonl").open("a") as out:
            out.write(json.dumps({"gpu": gpu, "xid": xid}) + "\n")


def _fabric_fenced(stack: Stack, guids: list[str], after_gen: int) -> bool:
    rows = stack.query("""SELECT d.generation, d.document::text, o.generation_applied
                          FROM fleet_fabricdesiredstate d JOIN fleet_fabricobservedstate o
                          ON o.name = d.name""")
    if not rows:
        return False
    generation, text, applied = rows[0]
    # the map written after the fault no longer has the ports, and the SM has it applied
    return generation > after_gen and not any(g in text for g in guids) and applied >= generation


def applied_node_document(stack: Stack, host: NodeHost) -> dict[str, Any] | None:
    """The node's desired-state document where its agent has applied that generation (or a
    later one); None while it has not, or before the node has any."""
    rows = stack.query("""SELECT d.generation, d.document, o.generation_applied
                          FROM fleet_nodedesiredstate d JOIN fleet_nodeobservedstate o
                          ON o.node_id = d.node_id WHERE d.node_id = %s""", [host.pk])
    if not rows:
        return None
    generation, doc, applied = rows[0]
    return doc if applied >= generation else None


def _gpu_fenced(stack: Stack, host: NodeHost, gpu: int, lease_id: str) -> bool:
    doc = applied_node_document(stack, host)
    if doc is None:
        return False
    tag = f"ls_{uuid.UUID(lease_id).hex[:16]}"
    grants = [g for g in doc.get("access_grants", []) if g.get("lease_id") == tag]
    return bool(grants) and gpu not in grants[0]["gpu_indices"]


def _fabric_generation(stack: Stack) -> int:
    rows = stack.query("SELECT generation FROM fleet_fabricdesiredstate")
    return int(rows[0][0]) if rows else 0


def _scenario(stack: Stack, fault: str, hosts: dict[str, NodeHost], procs: dict[str, Any],
              timeout: float) -> Outcome:
    out = Outcome(fault)
    lease_id = _order(stack)
    if not _wait(lambda: stack.states([lease_id]).get(lease_id) == "active", 90):
        out.notes.append(f"lease never active ({stack.states([lease_id])})")
        return out
    members = _members(stack, lease_id)
    victim = hosts[members[0][0]]
    gpu = members[0][1]
    guids = list(victim.ports)
    gen = _fabric_generation(stack)
    t0 = time.time()
    _inject(fault, victim, gpu, procs)
    if fault in NODE_FAULTS:
        fenced = _wait(lambda: _fabric_fenced(stack, guids, gen), timeout, 0.05)
    else:
        fenced = _wait(lambda: _gpu_fenced(stack, victim, gpu, lease_id), timeout, 0.05)
    out.fenced_s = time.time() - t0 if fenced else None
    replaced = _wait(lambda: stack.query(
        "SELECT EXTRACT(EPOCH FROM replaced_at) FROM leasing_leasefault "
        "WHERE lease_id::text = %s AND replaced_at IS NOT NULL", [lease_id]), timeout)
    out.replaced_s = float(replaced[0][0]) - t0 if replaced else None
    out.event = bool(stack.query(
        "SELECT 1 FROM leasing_leaseevent WHERE lease_id::text = %s AND kind = 'healed' "
        "AND reason LIKE %s", [lease_id, "%→%"]))
    out.offered = _offered(stack, lease_id, victim, gpu, fault)
    with stack.client() as c:
        c.post(f"/api/v1/leases/{lease_id}/release", json={"reason": "bench"},
               headers=stack.auth(TENANT))
    if fault == "silence":  # back: proven by its own agent before it returns to service
        os.killpg(procs[victim.hostname].pid, signal.SIGCONT)
        back = _wait(lambda: stack.query(
            "SELECT 1 FROM inventory_node n JOIN fleet_nodevalidation v ON v.node_id = n.id "
            "WHERE n.id = %s AND n.service = 'in_service' AND v.passed", [victim.pk]), 90, 0.5)
        out.notes.append("back: validated by its agent, returned" if back
                         else "back: NOT returned to service")
    return out


def _offered(stack: Stack, lease_id: str, host: NodeHost, gpu: int, fault: str) -> bool:
    """Is the failed part in service, or in anyone else's live allocation?"""
    part = "" if fault in NODE_FAULTS else " AND g.index = %s"
    params: list[Any] = [host.pk, lease_id] + ([] if fault in NODE_FAULTS else [gpu])
    rows = stack.query(f"""SELECT count(*) FROM leasing_allocation a
                           JOIN inventory_gpu g ON g.id = a.gpu_id
                           WHERE a.live AND a.node_id = %s AND a.lease_id::text <> %s{part}""",
                       params)
    table, key = ("inventory_node", "id") if fault in NODE_FAULTS else ("inventory_gpu",
                                                                        "node_id")
    extra = "" if fault in NODE_FAULTS else f" AND index = {int(gpu)}"
    service = stack.query(f"SELECT service FROM {table} WHERE {key} = %s{extra}", [host.pk])
    return bool(rows[0][0]) or service[0][0] == "in_service"


def _report(outcomes: list[Outcome], unreachable_after: float) -> bool:
    print(f"{'fault':10s} {'fenced':>8s} {'replaced':>9s}  event  offered")
    ok = True
    for o in outcomes:
        fenced = f"{o.fenced_s:.2f} s" if o.fenced_s is not None else "never"
        replaced = f"{o.replaced_s:.2f} s" if o.replaced_s is not None else "never"
        print(f"{o.fault:10s} {fenced:>8s} {replaced:>9s}  {'yes' if o.event else 'no ':3s}"
              f"    {'YES' if o.offered else 'no'}  {'; '.join(o.notes)}")
        bound = 60.0 if o.fault != "silence" else unreachable_after + 30.0
        ok &= (o.replaced_s is not None and o.replaced_s <= bound and o.event
               and not o.offered and o.fenced_s is not None
               and not any("NOT" in note for note in o.notes))
    print(f"target: replacement active within 60 s of the fault (silence: within 30 s after "
          f"the {unreachable_after:g} s unreachable threshold) — {'met' if ok else 'NOT met'}")
    return ok


def run(stack: Stack, o: argparse.Namespace) -> int:
    base = stack.tmp / "hosts"
    ibsim = None
    if o.sm == "opensm" or (o.sm == "auto" and ibsim_available()):
        names = [r[0] for r in stack.query("SELECT hostname FROM inventory_node ORDER BY 1")]
        ibsim = Ibsim(stack, names, stack.tmp / "ibsim")
        ibsim.start()
        ibsim.adopt_guids()
    hosts = _hosts(stack, base)
    procs = _start(stack, hosts, base, ibsim)
    _wait_enrolled(stack, len(hosts) + 1)
    sm: SubnetManager = _subnet_manager(stack, hosts, ibsim, o)
    sm.start()
    print(f"{len(hosts)} node agents + fabric agent enrolled and reporting; {sm.name_}",
          flush=True)
    by_name = {h.hostname: h for h in hosts}
    outcomes = [_scenario(stack, fault, by_name, procs, o.timeout) for fault in o.faults]
    stack.wait_settled(timeout=120, ok=TERMINAL_STATES)  # every lease released and ended
    time.sleep(3)  # the last teardown reports
    sm.stop.set()
    # the threshold in force: the setting, and at least 3 missed reports (fleet.intervals)
    threshold = max(o.unreachable_after, 3 * 10.0)
    return exit_status(stack, _report(outcomes, threshold))


def exit_status(stack: Stack, ok: bool) -> int:
    """Prints whether the stack's invariants hold; 0 where they do and the bench's own
    target was ``ok``, else 1."""
    problems = check_invariants(stack)
    print(f"invariants: {problems or 'hold'}")
    return 0 if ok and not problems else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="failed hardware in running leases, real agents")
    p.add_argument("--nodes", type=int, default=8)
    p.add_argument("--faults", nargs="+", choices=FAULTS, default=list(FAULTS))
    p.add_argument("--sm", choices=("auto", "opensm", "fake"), default="auto")
    p.add_argument("--sm-delay", type=float, default=0.25, help="fake SM only")
    p.add_argument("--sysfs-from", choices=("hca", "report"), default="hca")
    p.add_argument("--unreachable-after", type=float, default=30.0,
                   help="GPUPOOL_AGENT_UNREACHABLE_AFTER_S (production default 30)")
    p.add_argument("--timeout", type=float, default=120.0, help="per fault")
    o = p.parse_args(argv)
    config = StackConfig(nodes=o.nodes, gpus_per_node=8, nodes_per_leaf=16, tenants=0,
                         big_tenants=1, workers=2, web_workers=1, reconcile_every_s=5.0,
                         env={"GPUPOOL_SIMULATED_AGENTS": "0",
                              "GPUPOOL_AGENT_UNREACHABLE_AFTER_S": f"{o.unreachable_after:g}"})
    began = time.perf_counter()
    return run_on_stack(Stack(config), began, run, o)


if __name__ == "__main__":
    sys.exit(main())
