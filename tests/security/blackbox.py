"""The black-box security harness (issue 10 acceptance).

    python -m tests.security.blackbox [--rounds 3] [--fuzz 40]

Starts the production topology on loopback (``tests.portal.leasing.stack``: uvicorn,
Celery workers + beat, a fresh PostgreSQL database, a private redis-server) with
``GPUPOOL_ENV=production`` settings, real ``python -m agents node`` / ``fabric`` processes
over HTTP (``tests.bench.real_agents``), seeds a two-tenant world
(``tests.security.blackbox_world``) and, from outside, over HTTP only:

1. cross-tenant matrix: every case of ``tests/portal/credential_table.py`` × {session
   signed in through the login form, own-tenant key, the same user's other-tenant key,
   viewer, removed member}; a leak is one of tenant a's markers in an answer to a
   credential outside a, or a write by such a credential that succeeded / changed a's rows;
2. revocation: a running lease on a real agent; a member removed (API) and an SSH key
   deleted (page); seconds until the key leaves the agent's authorized_keys;
3. handover overlap: two tenants alternately on the same 8 GPUs, one worker SIGKILLed and
   Redis restarted mid-run; per GPU the tenants' access windows from lease events
   (active → ended) and from the agents' grant files (sampled every 50 ms);
4. agent-API fuzzing: hostile bodies with the real node's credential.

Prints routes, attempts, leaks, 5xx, max revocation s, max overlap s; exits 1 when a
target (0 leaks, 0 × 5xx, revocation ≤ 5 s, overlap 0 s) is missed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.bench.real_agents import SubnetManager, _hosts, _start_agents, _wait_enrolled
from tests.portal.leasing.stack import PYTHON, ROOT, Stack, StackConfig
from tests.security import bb_agents, bb_http

REVOCATION_TARGET_S = 5.0
PARTS = ("revocation", "matrix", "handover", "fuzz")
PRODUCTION_ENV = {
    "GPUPOOL_ENV": "production", "DEBUG": "0", "SECRET_KEY": "blackbox-" + "k" * 50,
    "ALLOWED_HOSTS": "127.0.0.1,localhost",
    # plain HTTP on loopback: the harness sends X-Forwarded-Proto as the TLS proxy would
    "SECURE_SSL_REDIRECT": "0",
    "GPUPOOL_SIMULATED_AGENTS": "0",
}


@dataclass
class Summary:
    routes: int = 0
    attempts: int = 0
    leaks: list[str] = field(default_factory=list)
    server_errors: list[str] = field(default_factory=list)
    revocation_s: dict[str, float] = field(default_factory=dict)
    overlap_s: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)  # the parts that ran to the end

    @property
    def max_revocation(self) -> float:
        return max(self.revocation_s.values(), default=float("inf"))

    @property
    def max_overlap(self) -> float:
        return max(self.overlap_s.values(), default=float("inf"))

    def failures(self) -> list[str]:
        out = [f"part not run to the end: {p}" for p in PARTS if p not in self.done]
        if self.leaks:
            out.append(f"{len(self.leaks)} leaks")
        if self.server_errors:
            out.append(f"{len(self.server_errors)} × 5xx")
        if not self.max_revocation <= REVOCATION_TARGET_S:
            out.append(f"revocation {self.max_revocation:.2f} s > {REVOCATION_TARGET_S} s")
        if not self.max_overlap <= 0.0:
            out.append(f"overlap {self.max_overlap:.2f} s > 0 s")
        return out

    def table(self) -> str:
        rows = [("routes", str(self.routes)), ("attempts", str(self.attempts)),
                ("leaks", str(len(self.leaks))), ("5xx", str(len(self.server_errors))),
                ("max revocation s", f"{self.max_revocation:.2f}"),
                ("max overlap s", f"{self.max_overlap:.2f}")]
        lines = [f"{name:18s} {value:>10s}" for name, value in rows]
        lines += [f"  revocation {k}: {v:.2f} s" for k, v in self.revocation_s.items()]
        lines += [f"  overlap {k}: {v:.2f} s" for k, v in self.overlap_s.items()]
        lines += [f"  LEAK {x}" for x in self.leaks[:20]]
        lines += [f"  5xx {x}" for x in self.server_errors[:20]]
        lines += [f"  note: {x}" for x in self.notes]
        return "\n".join(lines)


# --- the stack ----------------------------------------------------------------------------
def _collectstatic(stack: Stack) -> None:
    """Production serves the hashed static files (CompressedManifestStaticFilesStorage)."""
    if not (ROOT / "staticfiles" / "staticfiles.json").exists():
        subprocess.run([PYTHON, "-m", "django", "collectstatic", "--noinput", "-v", "0"],
                       cwd=ROOT, env=stack.env(), check=True, timeout=300,
                       capture_output=True)


def _seed_world(stack: Stack) -> dict[str, Any]:
    out = subprocess.run([PYTHON, "-m", "tests.security.blackbox_world"], cwd=ROOT,
                         env=stack.env(), capture_output=True, text=True, timeout=300,
                         check=False)
    if out.returncode != 0:
        raise RuntimeError(f"world seeding failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    world: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return world


def _api(stack: Stack, key: str, method: str, url: str, body: Any = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}", "X-Forwarded-Proto": "https",
               "Idempotency-Key": str(uuid.uuid4())}
    with stack.client(timeout=60) as c:
        return c.request(method, url, json=body, headers=headers)


def _order(stack: Stack, key: str, gpus: int, name: str) -> str:
    r = _api(stack, key, "POST", "/api/v1/orders",
             {"models": ["H100"], "gpu_count": gpus, "duration_hours": "1", "name": name})
    if r.status_code != 201:
        raise RuntimeError(f"order refused: {r.status_code} {r.text[:300]}")
    return str(r.json()["id"])


def _release(stack: Stack, key: str, lease_id: str) -> None:
    r = _api(stack, key, "POST", f"/api/v1/leases/{lease_id}/release", {"reason": "blackbox"})
    if r.status_code >= 500:
        raise RuntimeError(f"release: {r.status_code} {r.text[:300]}")


def _wait_state(stack: Stack, lease_id: str, states: tuple[str, ...], timeout: float) -> str:
    got = stack.wait_settled([lease_id], timeout=timeout, ok=states).get(lease_id, "")
    if got not in states:
        raise RuntimeError(f"lease {lease_id} is {got}, not {states}\n{stack.errors()}")
    return got


def _fingerprint(stack: Stack, tenant_a: str) -> Any:
    """Tenant a's rows that a write could change (timestamps of use excluded)."""
    def read() -> Any:
        return stack.query("""
            SELECT (SELECT json_agg(json_build_array(name, status)) FROM tenants_tenant
                     WHERE id = %(a)s),
                   (SELECT json_agg(json_build_array(user_id, role, max_gpus) ORDER BY id)
                     FROM tenants_membership WHERE tenant_id = %(a)s),
                   (SELECT json_agg(json_build_array(id, revoked_at) ORDER BY id)
                     FROM tenants_apikey WHERE tenant_id = %(a)s),
                   (SELECT json_agg(json_build_array(id, revoked_at, accepted_at) ORDER BY id)
                     FROM tenants_invitation WHERE tenant_id = %(a)s),
                   (SELECT json_agg(k.id ORDER BY k.id) FROM tenants_sshpublickey k
                     JOIN tenants_membership m ON m.user_id = k.user_id
                     WHERE m.tenant_id = %(a)s),
                   (SELECT json_agg(json_build_array(id, state, end_at) ORDER BY id)
                     FROM leasing_lease WHERE tenant_id = %(a)s)""", {"a": tenant_a})
    return read


# --- part 2: revocation -------------------------------------------------------------------
def revocation(stack: Stack, world: dict[str, Any], roots: list[Path],
               summary: Summary) -> str:
    keys, s = world["ssh_keys"], world["secrets"]
    lease = _order(stack, s["own_key"], 2, "a-active-secret")
    _wait_state(stack, lease, ("active",), 90)
    for name in ("leaver-key", "revoke-me"):
        if bb_agents.wait_keys(roots, keys[name]["line"], True, 30) == float("inf"):
            raise RuntimeError(f"{name} never reached the agent")
    url = next(c["url"] for c in world["cases"] if c["route"] == "membership-detail")
    url = url.replace(str(world["victim_membership"]), str(world["leaver_membership"]))
    t0 = time.monotonic()
    r = _api(stack, s["own_key"], "DELETE", url)
    if r.status_code != 204:
        raise RuntimeError(f"member removal: {r.status_code} {r.text[:200]}")
    summary.revocation_s["member removed (API)"] = bb_agents.wait_keys(
        roots, keys["leaver-key"]["line"], False, 30, since=t0)
    admin = bb_http.Browser(stack.base_url)
    admin.login("a-admin", world["password"])
    delete_url = next(c["url"] for c in world["cases"] if c["route"] == "web:ssh_key_delete")
    delete_url = delete_url.replace(keys["laptop"]["id"], keys["revoke-me"]["id"])
    t0 = time.monotonic()
    r = admin.request("POST", delete_url, form={})
    admin.close()
    if r.status_code != 302:
        raise RuntimeError(f"SSH key deletion: {r.status_code} {r.text[:200]}")
    summary.revocation_s["SSH key deleted (page)"] = bb_agents.wait_keys(
        roots, keys["revoke-me"]["line"], False, 30, since=t0)
    return lease


# --- part 3: handover overlap under faults ------------------------------------------------
def _cycle(stack: Stack, keys: dict[str, str], hold_s: float, timeout: float,
           fault: Any) -> list[str]:
    """Both tenants order the whole node at once (``fault()`` then strikes, while the
    first is being placed and provisioned); each holder is released after ``hold_s``;
    returns the two lease ids once both have ended."""
    ids = {t: _order(stack, k, 8, f"handover-{t}") for t, k in keys.items()}
    fault()
    pending = dict(ids)
    deadline = time.monotonic() + timeout
    while pending:
        if time.monotonic() > deadline:
            raise RuntimeError(f"handover stuck: {stack.states(list(ids.values()))}; all: "
                               f"{stack.query('SELECT name, state, gpu_count FROM leasing_lease')}"
                               f"; nodes: {stack.query('SELECT hostname, state FROM inventory_node')}"
                               f"\n{stack.errors()}")
        states = stack.states(list(pending.values()))
        for tenant, lease in list(pending.items()):
            if states.get(lease) == "active":
                time.sleep(hold_s)
                _release(stack, keys[tenant], lease)
                _wait_state(stack, lease, ("ended",), timeout)
                del pending[tenant]
            elif states.get(lease) in ("failed", "rejected", "cancelled", "expired"):
                raise RuntimeError(f"lease {lease} {states[lease]}\n{stack.errors()}")
        time.sleep(0.1)
    return list(ids.values())


def _fault(stack: Stack, round_no: int, summary: Summary) -> None:
    if round_no == 1 and stack.workers:
        stack.kill_worker(stack.workers[0])
        stack.start_worker()
        summary.notes.append("round 1: one Celery worker SIGKILLed (a fresh one started)")
    elif round_no == 2:
        stack.restart_redis()
        summary.notes.append("round 2: redis-server restarted empty (SHUTDOWN NOSAVE)")


def _db_windows(stack: Stack, lease_ids: list[str]) -> list[tuple[str, str, float, float]]:
    """(GPU, tenant, active, ended) of each lease's GPUs, from its lease events."""
    rows = stack.query("""
        SELECT DISTINCT a.gpu_id::text, l.tenant_id::text,
               (SELECT EXTRACT(EPOCH FROM min(e.created)) FROM leasing_leaseevent e
                 WHERE e.lease_id = l.id AND e.to_state = 'active'),
               (SELECT EXTRACT(EPOCH FROM max(e.created)) FROM leasing_leaseevent e
                 WHERE e.lease_id = l.id AND e.to_state = 'ended')
        FROM leasing_allocation a JOIN leasing_lease l ON l.id = a.lease_id
        WHERE l.id::text = ANY(%s)""", [lease_ids])
    return [(g, t, float(t0), float(t1) if t1 is not None else time.time())
            for g, t, t0, t1 in rows if t0 is not None]


def _clear(stack: Stack, world: dict[str, Any]) -> None:
    """Release or cancel every live lease of a and b (through the API, as their members),
    once each has settled (a provisioning lease can be neither)."""
    keys = {world["tenant_a"]: world["secrets"]["runner"],
            world["tenant_b"]: world["secrets"]["b_key"]}
    live = "state NOT IN ('ended', 'rejected', 'cancelled', 'failed', 'preempted', 'expired')"
    ids = [r[0] for r in stack.query(f"SELECT id::text FROM leasing_lease WHERE {live}")]
    stack.wait_settled(ids, timeout=60)
    for lease, tenant, state in stack.query(
            f"SELECT id::text, tenant_id::text, state FROM leasing_lease WHERE {live}"):
        for action in (("release", "cancel") if state == "active" else ("cancel", "release")):
            r = _api(stack, keys[tenant], "POST", f"/api/v1/leases/{lease}/{action}",
                     {"reason": "blackbox"})
            if r.status_code < 400:
                break
        else:
            raise RuntimeError(f"{lease} ({state}): {r.status_code} {r.text[:300]}")
    for lease in ids:
        _wait_state(stack, lease, ("ended", "cancelled"), 60)


def _tenant_of_grants(stack: Stack) -> dict[str, str]:
    """The agents' lease ids (GPUPOOL_LEASE_ID, ``ls_<16 hex>`` or the UUID) -> tenant."""
    out: dict[str, str] = {}
    for lease, tenant in stack.query("SELECT id::text, tenant_id::text FROM leasing_lease"):
        out[lease] = tenant
        out["ls_" + lease.replace("-", "")[:16]] = tenant
    return out


def handover(stack: Stack, world: dict[str, Any], roots: list[Path], rounds: int,
             summary: Summary) -> None:
    keys = {"a": world["secrets"]["runner"], "b": world["secrets"]["b_key"]}
    sampler = bb_agents.GrantSampler(roots)
    sampler.start()
    leases: list[str] = []
    try:
        for round_no in range(rounds):
            leases += _cycle(stack, keys, hold_s=1.0, timeout=120,
                             fault=lambda n=round_no: _fault(stack, n, summary))
    finally:
        sampler.stop.set()
        sampler.join(5)
    windows = _db_windows(stack, leases)
    summary.overlap_s["lease events (active → ended)"] = bb_agents.window_overlap(windows)
    summary.overlap_s["agents' grant files"] = bb_agents.sampled_overlap(
        sampler.samples, _tenant_of_grants(stack))
    granted = sum(1 for _, grants in sampler.samples if grants)
    summary.notes.append(f"handover: {len(leases)} leases, {len(sampler.samples)} grant "
                         f"samples ({granted} with a grant), {len(windows)} GPU windows")
    if not granted or len(windows) != 8 * len(leases):
        raise RuntimeError("the handover saw no grants / not every GPU window")


# --- part 4: agent-API fuzzing ------------------------------------------------------------
def fuzz(stack: Stack, hosts: list[Any], examples: int, summary: Summary) -> None:
    cred = json.loads((hosts[0].root / "state" / "credential.json").read_text())
    result = bb_agents.fuzz_agent_api(stack.base_url, cred["node_id"], cred["credential"],
                                      examples)
    summary.attempts += result.attempts
    summary.server_errors += [f"agent API {x}" for x in result.server_errors]
    summary.notes.append(f"agent-API fuzz: {result.attempts} requests, statuses "
                         f"{dict(sorted(result.statuses.items()))}, "
                         f"{len(result.bad_bodies)} refusals without an error body")
    summary.notes += [f"agent API refusal without error body: {x}"
                      for x in result.bad_bodies[:5]]


# --- the run ------------------------------------------------------------------------------
def _agents(stack: Stack) -> tuple[list[Any], list[Path], SubnetManager]:
    base = stack.tmp / "hosts"
    hosts = _hosts(stack, base)
    _start_agents(stack, hosts, base, None)
    _wait_enrolled(stack, len(hosts) + 1)
    sm = SubnetManager(stack, hosts, 0.05)
    sm.start()
    return hosts, [h.root / "access" for h in hosts], sm


def run(o: argparse.Namespace) -> Summary:
    summary = Summary()
    config = StackConfig(nodes=1, gpus_per_node=8, nodes_per_leaf=8, tenants=0,
                         big_tenants=1, workers=2, web_workers=1, reconcile_every_s=2.0,
                         env=dict(PRODUCTION_ENV))
    began = time.monotonic()
    sm: SubnetManager | None = None
    with Stack(config) as stack:
        try:
            _collectstatic(stack)
            world = _seed_world(stack)
            hosts, roots, sm = _agents(stack)
            print(f"stack + {len(hosts)} agents up in {time.monotonic() - began:.0f} s "
                  f"(logs: {stack.tmp})",
                  flush=True)
            lease = revocation(stack, world, roots, summary)
            summary.done.append("revocation")
            print(f"revocation done at {time.monotonic() - began:.0f} s", flush=True)
            matrix = bb_http.run_matrix(stack.base_url, world, lease,
                                        _fingerprint(stack, world["tenant_a"]))
            summary.routes, summary.attempts = matrix.routes, matrix.attempts
            summary.leaks += matrix.leaks
            summary.server_errors += matrix.server_errors
            summary.notes.append(f"matrix: {len(matrix.unexpected)} statuses differ from "
                                 "credential_table (one shared world, not one per case)")
            summary.notes += [f"differs: {x}" for x in matrix.unexpected[:o.show]]
            summary.done.append("matrix")
            print(f"matrix done at {time.monotonic() - began:.0f} s", flush=True)
            _clear(stack, world)  # the matrix's own orders hold GPUs: free the node
            _ = lease
            handover(stack, world, roots, o.rounds, summary)
            summary.done.append("handover")
            print(f"handover done at {time.monotonic() - began:.0f} s", flush=True)
            fuzz(stack, hosts, o.fuzz, summary)
            summary.done.append("fuzz")
            summary.server_errors += _logged_errors(stack)
        except (RuntimeError, httpx.HTTPError, subprocess.SubprocessError, OSError) as exc:
            summary.notes.append(f"harness failed: {exc}"[:3000])
            summary.notes.append(stack.logs(15)[-4000:])
        finally:
            if sm is not None:  # before the stack drops the database it reads
                sm.stop.set()
                sm.join(5)
    summary.notes.append(f"total {time.monotonic() - began:.0f} s")
    return summary


def _logged_errors(stack: Stack) -> list[str]:
    """A 500 the harness did not see (another process's request) still counts."""
    lines = stack.log_tail("web", 100_000).splitlines()
    out = []
    for i, line in enumerate(lines):
        if "Internal Server Error" in line:
            cause = next((x for x in lines[i + 1:i + 80] if x and not x.startswith(" ")
                          and "Traceback" not in x), "")
            out.append(f"web log: {line[:160]} ({cause[:200]})")
    return out[:20]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="black-box security harness (issue 10)")
    p.add_argument("--rounds", type=int, default=3, help="handover rounds (≥ 3: both faults)")
    p.add_argument("--fuzz", type=int, default=40, help="hostile requests per agent endpoint")
    p.add_argument("--show", type=int, default=15, help="status differences to print")
    o = p.parse_args(argv)
    summary = run(o)
    print(summary.table())
    failures = summary.failures()
    print("targets met" if not failures else "TARGETS MISSED: " + ", ".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
