"""Race harness and idempotency against a live stack (PostgreSQL, Redis, uvicorn, Celery).

Many client processes order GPUs over HTTP with per-tenant API keys while several workers
schedule; afterwards SQL proves no GPU was over-committed and no quota overrun happened
(see ``stack.check_invariants``). The Idempotency-Key part sends each order several times
concurrently and checks one order per key and byte-identical answers, plus the 422 (same
key, other body) and 409 (same key while the first is in flight) cases.

Standalone, full size (issue 4)::

    python -m tests.portal.leasing.test_race --clients 16 --orders 2000 --tenants 8 \
        --gpus 64 --workers 2 --idem-keys 500
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import multiprocessing
import random
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.portal.leasing.stack import TRANSITIONAL, Stack, StackConfig, check_invariants

FRACTIONS = [125, 250, 375, 500, 625, 750, 875]


def _order_body(rng: random.Random) -> dict[str, Any]:
    roll = rng.random()
    body: dict[str, Any]
    if roll < 0.35:
        body = {"gpu_count": 1}
    elif roll < 0.60:
        body = {"gpu_count": 2}
    elif roll < 0.78:
        body = {"gpu_count": 4}
    elif roll < 0.86:
        body = {"gpu_count": 8}
    elif roll < 0.89:
        body = {"gpu_count": 4, "nodes": 2}
    elif roll < 0.97:
        body = {"gpu_count": 1, "gpu_milli": rng.choice(FRACTIONS)}
    elif roll < 0.985:
        body = {"gpu_count": 0}  # invalid → 400
    else:
        body = {"gpu_count": 1, "models": ["NoSuchGPU"]}  # invalid → 400
    if rng.random() < 0.5:  # short: expires while the run goes on (churn)
        end = datetime.now(UTC) + timedelta(seconds=rng.uniform(3, 12))
        body["end_at"] = end.isoformat()
    else:
        body["duration_hours"] = str(rng.choice([1, 2, 3, 4]))
    if rng.random() < 0.1:
        body["priority"] = "spot"
    body["name"] = f"race-{rng.randrange(10**6)}"
    return body


@dataclass
class ClientResult:
    codes: Counter[int] = field(default_factory=Counter)
    action_codes: Counter[str] = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)
    hangs: int = 0
    transport_errors: list[str] = field(default_factory=list)
    transport_retries: int = 0
    created: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)


def _client(args: tuple[str, dict[str, str], list[str], int, int, float, float]) -> ClientResult:
    base_url, keys, tenants, orders, seed, cancel_p, timeout = args
    rng = random.Random(seed)
    out = ClientResult()

    def call(client: httpx.Client, what: str, url: str, body: Any,
             headers: dict[str, str]) -> httpx.Response | None:
        began = time.perf_counter()
        for attempt in range(3):
            try:
                r = client.post(url, json=body, headers=headers)
                break
            except httpx.TimeoutException:
                out.hangs += 1
                return None
            except httpx.TransportError as exc:
                # A keep-alive connection the server closed as we reused it: retrying is
                # safe (orders carry an Idempotency-Key; cancel/release are idempotent).
                if attempt == 2:
                    out.transport_errors.append(f"{what}: {exc!r}")
                    return None
                out.transport_retries += 1
        out.latencies.append(time.perf_counter() - began)
        if r.status_code >= 500:
            out.server_errors.append(f"{what} {r.status_code}: {r.text[:300]}")
        return r

    with httpx.Client(base_url=base_url, timeout=timeout) as client:
        for _ in range(orders):
            tenant = rng.choice(tenants)
            auth = {"Authorization": f"Bearer {keys[tenant]}"}
            headers = {**auth, "Idempotency-Key": str(uuid.UUID(int=rng.getrandbits(128)))}
            r = call(client, "order", "/api/v1/orders", _order_body(rng), headers)
            if r is None:
                continue
            out.codes[r.status_code] += 1
            if r.status_code != 201:
                continue
            lease_id = r.json()["id"]
            out.created.append(lease_id)
            if rng.random() < cancel_p:
                time.sleep(rng.choice([0, 0, 0.05, 0.3, 1.0]))
                c = call(client, "cancel", f"/api/v1/leases/{lease_id}/cancel", {}, auth)
                if c is not None:
                    out.action_codes[f"cancel {c.status_code}"] += 1
                    if c.status_code in (400, 409):  # already active: release it instead
                        rel = call(client, "release", f"/api/v1/leases/{lease_id}/release",
                                   {}, auth)
                        if rel is not None:
                            out.action_codes[f"release {rel.status_code}"] += 1
    return out


@dataclass
class RaceReport:
    orders_sent: int
    codes: dict[int, int]
    action_codes: dict[str, int]
    server_errors: list[str]
    hangs: int
    transport_errors: list[str]
    transport_retries: int
    created: int
    missing: list[str]
    final_states: dict[str, int]
    unsettled: dict[str, str]
    violations: list[str]
    seconds: float
    settle_seconds: float
    request_p50_ms: float
    request_p99_ms: float

    @property
    def ok(self) -> bool:
        return not (self.server_errors or self.hangs or self.transport_errors or self.missing
                    or self.unsettled or self.violations)

    def summary(self) -> str:
        return json.dumps({k: v for k, v in self.__dict__.items()}, indent=1, default=str)


# A running lease this close to its end counts as moving: its expiry (ACTIVE → RELEASING
# → teardown) would start while the invariants are read.
EXPIRY_MARGIN_S = 5.0


def wait_quiet(stack: Stack, timeout: float, stable_s: float = 3.0,
               expiry_margin_s: float | None = EXPIRY_MARGIN_S) -> dict[str, str]:
    """Until no lease is transitional or about to expire (within ``stable_s`` +
    ``expiry_margin_s``; None: not waited for), and nothing changed for ``stable_s``; the
    last states seen. (A short lease placed late from the queue expires seconds after the
    run looked quiet: CI once read the invariants in the instant between its ACTIVE →
    RELEASING and its teardown push.)"""
    deadline = time.monotonic() + timeout
    last: dict[str, str] = {}
    since = time.monotonic()
    while time.monotonic() < deadline:
        states = stack.states()
        if states != last or any(s in TRANSITIONAL for s in states.values()) or \
                (expiry_margin_s is not None
                 and stack.running_leases_ending_within(stable_s + expiry_margin_s)):
            last, since = states, time.monotonic()
        elif time.monotonic() - since >= stable_s:
            return states
        time.sleep(0.5)
    return last


def run_race(stack: Stack, *, clients: int, orders: int, seed: int = 1,
             cancel_p: float = 0.15, timeout: float = 60.0,
             settle_timeout: float = 120.0) -> RaceReport:
    tenants = sorted(k for k in stack.keys if k.startswith("t"))
    per_client = max(orders // clients, 1)
    jobs = [(stack.base_url, stack.keys, [tenants[i % len(tenants)],
                                          tenants[(i + 1) % len(tenants)]],
             per_client, seed * 1000 + i, cancel_p, timeout) for i in range(clients)]
    began = time.perf_counter()
    # Client processes started fresh ("spawn"), not forked: forking a test process that
    # already runs threads (a live-server thread, logging handlers) can leave a child
    # deadlocked on a lock copied mid-use, which hung CI (test_race_clients_do_not_fork).
    with multiprocessing.get_context("spawn").Pool(clients) as pool:
        results = pool.map(_client, jobs)
    seconds = time.perf_counter() - began
    total = ClientResult()
    for r in results:
        total.codes.update(r.codes)
        total.action_codes.update(r.action_codes)
        total.server_errors += r.server_errors
        total.hangs += r.hangs
        total.transport_errors += r.transport_errors
        total.transport_retries += r.transport_retries
        total.created += r.created
        total.latencies += r.latencies
    settle_began = time.perf_counter()
    states = wait_quiet(stack, settle_timeout)
    settle = time.perf_counter() - settle_began
    missing = [i for i in total.created if i not in states]
    unsettled = {i: s for i, s in states.items() if s in TRANSITIONAL}
    lat = sorted(total.latencies) or [0.0]
    return RaceReport(
        orders_sent=per_client * clients, codes=dict(total.codes),
        action_codes=dict(total.action_codes), server_errors=total.server_errors[:20],
        hangs=total.hangs, transport_errors=total.transport_errors[:20],
        transport_retries=total.transport_retries,
        created=len(total.created), missing=missing[:20],
        final_states=dict(Counter(states.values())), unsettled=unsettled,
        violations=check_invariants(stack), seconds=round(seconds, 1),
        settle_seconds=round(settle, 1),
        request_p50_ms=round(lat[len(lat) // 2] * 1000, 1),
        request_p99_ms=round(lat[min(int(len(lat) * 0.99), len(lat) - 1)] * 1000, 1))


# --- idempotency ------------------------------------------------------------------------------

@dataclass
class IdemReport:
    keys: int
    copies: int
    codes: dict[int, int]
    mismatched: list[str]
    orders_per_key: dict[int, int]
    failures: list[str]
    seconds: float
    transport_retries: int = 0

    @property
    def ok(self) -> bool:
        return not self.mismatched and not self.failures and set(self.orders_per_key) == {1}


async def _idem_async(stack: Stack, tenants: list[str], keys: int, copies: int,
                      concurrency: int, timeout: float) -> tuple[dict[str, list[Any]], list[str]]:
    rng = random.Random(7)
    sem = asyncio.Semaphore(concurrency)
    answers: dict[str, list[Any]] = {}
    failures: list[str] = []
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=timeout,
                                 limits=httpx.Limits(max_connections=concurrency * copies)) as c:
        async def one(key: str, tenant: str, body: dict[str, Any]) -> None:
            headers = {**stack.auth(tenant), "Idempotency-Key": key}

            async def send() -> Any:
                for attempt in range(3):  # a dropped keep-alive connection: retry, same key
                    try:
                        r = await c.post("/api/v1/orders", json=body, headers=headers)
                    except httpx.TransportError as exc:
                        if attempt == 2 or isinstance(exc, httpx.TimeoutException):
                            return ("error", repr(exc))
                        failures.append(f"retried {key}: {exc!r}")
                        continue
                    return (r.status_code, _canonical(r.content))
                return ("error", "unreachable")

            async with sem:
                answers[key] = list(await asyncio.gather(*(send() for _ in range(copies))))

        jobs = []
        for i in range(keys):
            tenant = tenants[i % len(tenants)]
            body = {"gpu_count": 1, "gpu_milli": rng.choice(FRACTIONS),
                    "duration_hours": str(rng.choice([1, 2])), "name": f"idem-{i}"}
            jobs.append(one(f"idem-{i}-{uuid.uuid4()}", tenant, body))
        await asyncio.gather(*jobs)
    return answers, failures


def _canonical(content: bytes) -> str:
    """The body as canonical JSON: a replay comes from a jsonb column, which keeps neither
    key order nor whitespace, so answers are compared as JSON values."""
    try:
        return json.dumps(json.loads(content), sort_keys=True)
    except ValueError:
        return content.decode(errors="replace")


def run_idempotency(stack: Stack, *, keys: int, copies: int = 3, concurrency: int = 16,
                    timeout: float = 60.0) -> IdemReport:
    tenants = sorted(k for k in stack.keys if k.startswith("b")) or sorted(stack.keys)
    began = time.perf_counter()
    # Own thread, own event loop: an earlier test (Playwright's sync API, Channels) may
    # have left a loop running in this thread, and asyncio.run() refuses to nest.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        answers, notes = pool.submit(asyncio.run, _idem_async(
            stack, tenants, keys, copies, concurrency, timeout)).result()
    failures: list[str] = []
    seconds = time.perf_counter() - began
    codes: Counter[int] = Counter()
    mismatched = []
    for key, got in answers.items():
        for status, _ in got:
            codes[status] += 1
        if any(a != got[0] for a in got[1:]):
            mismatched.append(f"{key}: {[(s, b[:120]) for s, b in got]}")
        if got[0][0] != 201:
            failures.append(f"{key}: first answer {got[0][0]} {got[0][1][:200]!r}")
    # One order per key: the key is recorded in the 'order accepted' event.
    rows = stack.query("""SELECT e.data->>'idempotency_key', COUNT(DISTINCT e.lease_id)
                          FROM leasing_leaseevent e WHERE e.to_state = 'queued'
                           AND e.data->>'idempotency_key' = ANY(%s)
                          GROUP BY 1""", [list(answers)])
    per_key = dict(rows)
    orders_per_key = Counter(per_key.get(k, 0) for k in answers)
    stored = dict(stack.query("""SELECT key, response_status FROM leasing_idempotencykey
                                 WHERE key = ANY(%s)""", [list(answers)]))
    for key, got in answers.items():
        if stored.get(key) != got[0][0]:
            failures.append(f"{key}: stored status {stored.get(key)} != answered {got[0][0]}")
    return IdemReport(keys=keys, copies=copies, codes=dict(codes), mismatched=mismatched[:10],
                      orders_per_key=dict(orders_per_key), failures=failures[:10],
                      seconds=round(seconds, 1), transport_retries=len(notes))


def check_reused_key_422(stack: Stack, tenant: str) -> list[str]:
    problems = []
    key = f"reuse-{uuid.uuid4()}"
    headers = {**stack.auth(tenant), "Idempotency-Key": key}
    a = {"gpu_count": 1, "gpu_milli": 125, "duration_hours": "1", "name": "a"}
    b = {**a, "name": "b"}
    with stack.client() as c:
        first = c.post("/api/v1/orders", json=a, headers=headers)
        other = c.post("/api/v1/orders", json=b, headers=headers)
        again = c.post("/api/v1/orders", json=a, headers=headers)
    if first.status_code != 201:
        problems.append(f"first {first.status_code} {first.text[:200]}")
    if other.status_code != 422:
        problems.append(f"different body: {other.status_code} {other.text[:200]} (want 422)")
    if (again.status_code, _canonical(again.content)) != (first.status_code,
                                                          _canonical(first.content)):
        problems.append(f"replay differs: {again.status_code} {again.text[:200]}")
    n = stack.query("SELECT COUNT(*) FROM leasing_leaseevent WHERE to_state = 'queued' "
                    "AND data->>'idempotency_key' = %s", [key])[0][0]
    if n != 1:
        problems.append(f"{n} orders for the key")
    return problems


def check_in_flight_409(stack: Stack, tenant: str) -> list[str]:
    """Hold the key's row uncommitted (as a first request still running would), send the
    same key: the server waits out its lock timeout and answers 409; nothing is written.
    After the holder rolls back, the same request succeeds."""
    problems: list[str] = []
    key = f"inflight-{uuid.uuid4()}"
    body = {"gpu_count": 1, "gpu_milli": 250, "duration_hours": "1", "name": "inflight"}
    headers = {**stack.auth(tenant), "Idempotency-Key": key}
    holder = stack.connect()
    holder.autocommit = False
    try:
        holder.execute("""INSERT INTO leasing_idempotencykey
                          (tenant_id, key, request_hash, response_status, response_body, created)
                          VALUES (%s, %s, 'in-flight', 0, '{}', now())""",
                       [stack.tenant_ids[tenant], key])
        result: dict[str, Any] = {}

        def send() -> None:
            with stack.client(timeout=60) as c:
                began = time.perf_counter()
                result["r"] = c.post("/api/v1/orders", json=body, headers=headers)
                result["s"] = time.perf_counter() - began

        t = threading.Thread(target=send)
        t.start()
        t.join(45)
        if t.is_alive():
            problems.append("request with an in-flight key hung")
        else:
            r = result["r"]
            if r.status_code != 409:
                problems.append(f"in-flight: {r.status_code} {r.text[:200]} (want 409)")
    finally:
        holder.rollback()
        holder.close()
    n = stack.query("SELECT COUNT(*) FROM leasing_leaseevent WHERE to_state = 'queued' "
                    "AND data->>'idempotency_key' = %s", [key])[0][0]
    if n != 0:
        problems.append(f"409 wrote {n} orders")
    with stack.client() as c:
        r = c.post("/api/v1/orders", json=body, headers=headers)
    if r.status_code != 201:
        problems.append(f"after the holder rolled back: {r.status_code} {r.text[:200]}")
    return problems


# --- pytest (CI size) -------------------------------------------------------------------------

CI = {"clients": 16, "orders": 320, "tenants": 8, "gpus": 64, "workers": 2, "idem_keys": 100}


def stack_config(tenants: int, gpus: int, workers: int, big_tenants: int = 2) -> StackConfig:
    return StackConfig(nodes=max(gpus // 8, 1), gpus_per_node=8, nodes_per_leaf=8,
                       tenants=tenants, quota_gpus=16, max_pending=20, workers=workers,
                       web_workers=2, big_tenants=big_tenants)


@pytest.fixture(scope="module")
def stack() -> Any:
    with Stack(stack_config(CI["tenants"], CI["gpus"], CI["workers"])) as s:
        yield s


pytestmark = [pytest.mark.services("postgres", "redis"), pytest.mark.slow]


def test_preemption_makes_room_for_on_demand(stack: Stack) -> None:
    """Regression: the pass wrote the preemptor's allocations before preempting its victims,
    so it always lost to the exclusion constraint ("lost a race … stays queued") and spot
    leases were never reclaimed. Runs first, on the empty pool."""
    gpus = stack.config.nodes * stack.config.gpus_per_node
    spot = {"gpu_count": 8, "priority": "spot", "duration_hours": "2"}
    with stack.client() as c:
        ids = [c.post("/api/v1/orders", json=spot, headers=stack.auth("b0")).json()["id"]
               for _ in range(gpus // 8)]
        assert set(stack.wait_settled(ids, timeout=60, ok=("active",)).values()) == {"active"}
        r = c.post("/api/v1/orders", json={"gpu_count": 8, "duration_hours": "1"},
                   headers=stack.auth("t0"))
        assert r.status_code == 201, r.text
        mine = r.json()["id"]
        states = stack.wait_settled([mine], timeout=20, ok=("active",))
        assert states[mine] == "active", (states, stack.log_tail("worker0"))
        after = stack.wait_settled(ids, timeout=20)
        assert sorted(after.values()).count("preempted") == 1, after
        for lease_id in [*ids, mine]:
            c.post(f"/api/v1/leases/{lease_id}/release", json={},
                   headers=stack.auth("t0" if lease_id == mine else "b0"))
    stack.wait_settled(timeout=30)
    assert check_invariants(stack) == []


def test_race_clients_do_not_fork(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: the clients ran in a forked process pool; forked from a test process
    that already ran a live-server thread, one child deadlocked on exit and CI hung."""
    import os

    def no_fork() -> int:
        raise AssertionError("the race harness must not fork")

    monkeypatch.setattr(os, "fork", no_fork)
    report = run_race(stack, clients=2, orders=4, cancel_p=0.0, settle_timeout=30)
    assert sum(report.codes.values()) == report.orders_sent == 4
    assert report.ok, report.summary()


def test_race_no_overcommit_no_quota_overrun(stack: Stack) -> None:
    report = run_race(stack, clients=CI["clients"], orders=CI["orders"], settle_timeout=90)
    print(report.summary())
    assert report.ok, "\n".join(report.violations) + report.summary() + "\n" + stack.logs(20)
    assert report.codes.get(201, 0) > CI["orders"] // 4
    assert sum(report.codes.values()) == report.orders_sent
    assert set(report.codes) <= {201, 400, 403, 404, 409, 422}


def test_idempotency_concurrent_duplicates(stack: Stack) -> None:
    report = run_idempotency(stack, keys=CI["idem_keys"], copies=3)
    print(report)
    assert report.ok, report


def test_idempotency_key_reused_with_other_body_is_422(stack: Stack) -> None:
    assert check_reused_key_422(stack, "b0") == []


def test_idempotency_key_in_flight_is_409(stack: Stack) -> None:
    assert check_in_flight_409(stack, "b1") == []


# --- standalone -------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--orders", type=int, default=2000, help="total orders over all clients")
    p.add_argument("--tenants", type=int, default=8)
    p.add_argument("--gpus", type=int, default=64)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--idem-keys", type=int, default=500)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--settle-timeout", type=float, default=180)
    o = p.parse_args(argv)
    ok = True
    with Stack(stack_config(o.tenants, o.gpus, o.workers)) as s:
        print(f"stack up in {s.timings['start_s']:.1f}s: db {s.db_name}, web {s.base_url}, "
              f"redis :{s.redis_port}, {o.workers} workers", flush=True)
        race = run_race(s, clients=o.clients, orders=o.orders, seed=o.seed,
                        settle_timeout=o.settle_timeout)
        print("race:", race.summary(), flush=True)
        ok &= race.ok
        idem = run_idempotency(s, keys=o.idem_keys, copies=3)
        print("idempotency:", idem, flush=True)
        ok &= idem.ok
        p422 = check_reused_key_422(s, "b0")
        print("422 case:", p422 or "ok", flush=True)
        p409 = check_in_flight_409(s, "b1")
        print("409 case:", p409 or "ok", flush=True)
        ok &= not p422 and not p409
        if not ok:
            print(s.logs(30))
    print("RESULT:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
