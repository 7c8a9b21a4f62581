"""Agent side of the black-box harness: the real node agents' grant files (revocation
timing, access windows) and a seeded fuzzer for the agent API over HTTP."""

from __future__ import annotations

import copy
import json
import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

AGENT_BASE = "/api/agent/v1"


# --- grant files on the agents' access roots ---------------------------------------------
def authorized_keys(access_roots: list[Path]) -> str:
    """Every lease account's authorized_keys on every node, concatenated."""
    out = []
    for root in access_roots:
        for path in (root / "home").glob("*/.ssh/authorized_keys"):
            try:
                out.append(path.read_text())
            except OSError:  # replaced or removed while read
                continue
    return "".join(out)


def wait_keys(access_roots: list[Path], line: str, present: bool, timeout: float,
              since: float | None = None) -> float:
    """Seconds after ``since`` (monotonic; default now) until ``line`` is (present) / is
    no longer (not present) in any authorized_keys file; ``inf`` on timeout."""
    began = time.monotonic() if since is None else since
    key = line.split()[1]
    while time.monotonic() - began < timeout:
        if (key in authorized_keys(access_roots)) == present:
            return time.monotonic() - began
        time.sleep(0.02)
    return float("inf")


def granted_gpus(access_roots: list[Path]) -> dict[str, set[str]]:
    """lease id (the agent's ``GPUPOOL_LEASE_ID``) -> the GPUs (node/uuid) it can use."""
    out: dict[str, set[str]] = {}
    for root in access_roots:
        for path in (root / "etc" / "gpupool" / "leases").glob("*.env"):
            try:
                text = path.read_text()
            except OSError:
                continue
            env = dict(line.removeprefix("export ").split("=", 1)
                       for line in text.splitlines() if line.startswith("export "))
            lease = env.get("GPUPOOL_LEASE_ID", path.stem)
            gpus = [g for g in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]
            out.setdefault(lease, set()).update(f"{root.parent.name}/{g}" for g in gpus)
    return out


@dataclass(eq=False)
class GrantSampler(threading.Thread):
    """Samples the grant files every ``every_s``: (time, {lease id: GPUs})."""

    access_roots: list[Path]
    every_s: float = 0.05
    samples: list[tuple[float, dict[str, set[str]]]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, daemon=True, name="grant-sampler")

    def run(self) -> None:
        while not self.stop.wait(self.every_s):
            self.samples.append((time.time(), granted_gpus(self.access_roots)))


def sampled_overlap(samples: list[tuple[float, dict[str, set[str]]]],
                    tenant_of: dict[str, str]) -> float:
    """Longest run of consecutive samples in which one GPU was granted to two tenants."""
    longest, run_start = 0.0, None
    for t, grants in samples:
        holders: dict[str, set[str]] = {}
        for lease, gpus in grants.items():
            for gpu in gpus:
                holders.setdefault(gpu, set()).add(tenant_of.get(lease, lease))
        if any(len(ts) > 1 for ts in holders.values()):
            run_start = t if run_start is None else run_start
            longest = max(longest, t - run_start)
        else:
            run_start = None
    return longest


def window_overlap(windows: list[tuple[str, str, float, float]]) -> float:
    """Max seconds two tenants' windows on one GPU intersect. windows: (gpu, tenant, t0, t1)."""
    worst = 0.0
    by_gpu: dict[str, list[tuple[str, float, float]]] = {}
    for gpu, tenant, t0, t1 in windows:
        by_gpu.setdefault(gpu, []).append((tenant, t0, t1))
    for spans in by_gpu.values():
        for i, (ta, a0, a1) in enumerate(spans):
            for tb, b0, b1 in spans[i + 1:]:
                if ta != tb:
                    worst = max(worst, min(a1, b1) - max(a0, b0))
    return worst


# --- agent-API fuzzing --------------------------------------------------------------------
EDGE: list[Any] = [0, -1, 1, 2**15, 2**31, 2**53 + 1, 2**63, -(2**63) - 1, 10**30, 1e308, -0.0,
        float("inf"), float("nan"), None, True, False, "", "\x00", "\ud800", "x" * 300,
        "h" * 10_000, "0x" + "f" * 16, "💥" * 100, "../../etc", "%00", "ssh-ed25519 AAAA\nx",
        [], {}, [[[[[]]]]], {"a": {"b": {"c": None}}}]
RAW = [b"[" * 50_000 + b"]" * 50_000, b'{"protocol": 1, "seq": 1e999}', b"\xff\xfe\x00",
       b"", b"null", b"{", b'{"protocol": NaN}', b'{"a": ' * 1000, b"1" * 5000]


def report_body(node_id: str, seq: int) -> dict[str, Any]:
    gpu = {"index": 0, "uuid": "GPU-fuzz-0", "name": "NVIDIA H100 80GB HBM3", "healthy": True,
           "gpu_util_pct": 50, "memory_used_bytes": 1 << 30, "power_w": 300.5,
           "temperature_c": 40}
    port = {"device": "mlx5_0", "port": 1, "port_guid": "0x0002c90300000001",
            "state": "ACTIVE", "state_id": 4, "phys_state": "LinkUp", "phys_state_id": 5,
            "rate_gbps": 400.0, "link_layer": "InfiniBand", "lid": 7, "pkeys": ["0xffff"],
            "counters": {"link_downed": 0}, "saturated": []}
    return {"protocol": 1, "node_id": node_id, "seq": seq,
            "created_at": "2026-11-29T23:40:00+00:00", "agent_version": "0.1.0",
            "dropped_reports": 0, "observed": {"generation_applied": 0, "partitions": []},
            "telemetry": [{"ts": time.time(), "host": {"hostname": "fuzz"},
                           "gpu_system": {"available": True}, "gpus": [gpu],
                           "ib_ports": [port], "xid_events": []}]}


def enrol_body() -> dict[str, Any]:
    return {"protocol": 1, "bootstrap_token": "gpb_" + "A" * 43, "role": "node",
            "hostname": "fuzz-new", "agent_version": "0.1.0", "machine_id": "m",
            "inventory": {"host": {"hostname": "fuzz-new", "cpus": 8,
                                   "memory_total_bytes": 2**30},
                          "gpus": [{"index": 0, "uuid": "GPU-a", "name": "NVIDIA H100"}],
                          "ib_ports": [{"device": "mlx5_0", "port": 1, "rate_gbps": 400.0,
                                        "port_guid": "0x0002c903000e0b99"}]}}


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


def mutate(rng: random.Random, doc: Any) -> Any:
    """Replace, delete or add a hostile value at one to three places (as test_agent_fuzz)."""
    doc = copy.deepcopy(doc)
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(_paths(doc))
        if not path:
            return rng.choice(EDGE)
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        op = rng.choice(["replace", "replace", "delete", "add"])
        if op == "replace":
            parent[path[-1]] = copy.deepcopy(rng.choice(EDGE))
        elif op == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[str(rng.choice(EDGE))[:40]] = copy.deepcopy(rng.choice(EDGE))
        else:
            parent.append(copy.deepcopy(rng.choice(EDGE)))
    return doc


def payload(rng: random.Random, valid: dict[str, Any]) -> bytes:
    if rng.random() < 0.1:
        return rng.choice(RAW)
    return json.dumps(mutate(rng, valid), allow_nan=True).encode("utf-8", "surrogatepass")


@dataclass
class FuzzResult:
    attempts: int = 0
    server_errors: list[str] = field(default_factory=list)
    bad_bodies: list[str] = field(default_factory=list)  # a refusal without an error body
    statuses: dict[str, int] = field(default_factory=dict)  # "endpoint status" -> count


def _check(result: FuzzResult, label: str, r: httpx.Response) -> None:
    result.attempts += 1
    key = f"{label} {r.status_code}"
    result.statuses[key] = result.statuses.get(key, 0) + 1
    if r.status_code >= 500:
        result.server_errors.append(f"{label}: {r.status_code} {r.text[:200]}")
    elif r.status_code >= 400 and r.status_code not in (405, 429):
        try:
            error = r.json()["error"]
            assert isinstance(error["code"], str)
        except (ValueError, KeyError, TypeError, AssertionError):
            result.bad_bodies.append(f"{label}: {r.status_code} {r.text[:120]}")


def fuzz_agent_api(base_url: str, node_id: str, credential: str, examples: int,
                   seed: int = 10) -> FuzzResult:
    """``examples`` hostile requests per endpoint against the live agent API."""
    rng, result = random.Random(seed), FuzzResult()
    auth = {"Authorization": f"Bearer {credential}", "Content-Type": "application/json"}
    node = f"{AGENT_BASE}/nodes/{node_id}"
    with httpx.Client(base_url=base_url, timeout=60) as http:
        for i in range(examples):
            _check(result, "enrol", http.post(f"{AGENT_BASE}/enrol", headers={
                "Content-Type": "application/json"}, content=payload(rng, enrol_body())))
            _check(result, "report", http.post(f"{node}/reports", headers=auth,
                                               content=payload(rng, report_body(node_id,
                                                                                10**6 + i))))
            params = {"after_generation": str(rng.choice(EDGE))[:60],
                      "wait": rng.choice(["0", "-1", "nan", "-1e999", "x", ""])}
            target = rng.choice([node_id, "nd_other", str(uuid.uuid4()), "%00", "..%2f"])
            header = rng.choice([auth["Authorization"], "", "Bearer", "Basic x",
                                 "Bearer " + "A" * 300])
            _check(result, "desired-state", http.get(
                f"{AGENT_BASE}/nodes/{target}/desired-state", params=params,
                headers={"Authorization": header}))
        for _ in range(examples):  # last: a valid body would rotate the node's credential
            body = payload(rng, {"protocol": 1})
            if body == b'{"protocol": 1}':
                continue
            _check(result, "credential", http.post(f"{node}/credential", headers=auth,
                                                   content=body))
    return result
