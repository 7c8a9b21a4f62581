"""Issue 12 on a live stack (PostgreSQL, Redis, uvicorn, a Celery worker and beat): with the
reconciler beat slowed to 30 s, leases still go active on the convergence event and end at
their end time on an ETA task — neither waits for the beat."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.portal.leasing.stack import Stack, StackConfig, check_invariants

pytestmark = [pytest.mark.services("postgres", "redis"), pytest.mark.slow]

BEAT_S = 30.0


@pytest.fixture(scope="module")
def stack() -> Any:
    config = StackConfig(nodes=2, tenants=2, quota_gpus=16, workers=1, web_workers=1,
                         reconcile_every_s=BEAT_S)
    with Stack(config) as s:
        yield s


def _events(stack: Stack, lease_id: str, to_state: str) -> datetime:
    rows = stack.query("SELECT created FROM leasing_leaseevent WHERE lease_id::text = %s "
                       "AND to_state = %s AND kind = 'transition' ORDER BY id", [lease_id, to_state])
    assert rows, (lease_id, to_state, stack.logs())
    return rows[0][0]


def test_expiry_is_on_time_live(stack: Stack) -> None:
    ends = [datetime.now(UTC) + timedelta(seconds=s) for s in (8, 10, 12)]
    with stack.client() as c:
        ids = []
        for n, end in enumerate(ends):
            r = c.post("/api/v1/orders", json={"gpu_count": 1, "end_at": end.isoformat()},
                       headers=stack.auth("t0"))
            assert r.status_code == 201, r.text
            ids.append((r.json()["id"], datetime.now(UTC), n))
    time.sleep(max((ends[-1] - datetime.now(UTC)).total_seconds(), 0) + 3)
    for lease_id, ordered, n in ids:
        active = _events(stack, lease_id, "active")
        assert active - ordered < timedelta(seconds=5), (lease_id, active - ordered)
        end = stack.query("SELECT end_at FROM leasing_lease WHERE id::text = %s",
                          [lease_id])[0][0]
        released = _events(stack, lease_id, "releasing")
        late = (released - end).total_seconds()
        print(f"lease {n}: order→active {(active - ordered).total_seconds():.2f} s, "
              f"expiry {late:+.2f} s after its end")
        assert -0.01 <= late <= 1.5, (lease_id, late)
    states = stack.wait_settled([i for i, _, _ in ids], timeout=20, ok=("expired",))
    assert set(states.values()) == {"expired"}, states
    assert check_invariants(stack) == []
