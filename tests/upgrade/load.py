"""An honest order load over the public API (tests/upgrade): threads that place orders
(``POST /api/v1/orders`` with an Idempotency-Key), list leases and release the ones they
hold, recording every answer. An *error* is a 5xx, a transport failure, or a 4xx without
the API's JSON error body; a clean 4xx (quota, pending limit, not releasable) is the API
doing its job. Every 201's lease id is an acknowledged order: it must exist afterwards."""

from __future__ import annotations

import random
import threading
import time
import uuid
from dataclasses import dataclass, field

import httpx

from tests.portal.leasing.stack import Stack


@dataclass
class Answer:
    at: float  # time.time()
    route: str
    status: int  # 0: no answer (transport error)
    detail: str = ""


@dataclass(eq=False)
class OrderLoad(threading.Thread):
    stack: Stack
    tenant: str
    seed: int = 0
    pause_s: float = 0.05
    answers: list[Answer] = field(default_factory=list)
    acked: list[tuple[float, str]] = field(default_factory=list)  # (when, lease id)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, daemon=True, name=f"load-{self.tenant}")
        self.rng = random.Random(self.seed)

    def run(self) -> None:
        with self.stack.client(timeout=60) as c:
            while not self.stop.is_set():
                self._order(c)
                if self.rng.random() < 0.3:
                    self._list_and_release(c)
                time.sleep(self.pause_s)

    def _call(self, c: httpx.Client, method: str, url: str, route: str,
              body: object = None) -> httpx.Response | None:
        headers = {**self.stack.auth(self.tenant), "Idempotency-Key": str(uuid.uuid4())}
        try:
            r = c.request(method, url, json=body, headers=headers)
        except httpx.HTTPError as exc:
            self.answers.append(Answer(time.time(), route, 0, repr(exc)))
            return None
        self.answers.append(Answer(time.time(), route, r.status_code,
                                   "" if r.status_code < 400 else r.text[:300]))
        return r

    def _order(self, c: httpx.Client) -> None:
        body = {"models": ["H100"], "gpu_count": self.rng.choice([1, 2, 4, 8]),
                "duration_hours": "1", "name": f"load-{self.tenant}"}
        r = self._call(c, "POST", "/api/v1/orders", "order", body)
        if r is not None and r.status_code == 201:
            self.acked.append((time.time(), str(r.json()["id"])))

    def _list_and_release(self, c: httpx.Client) -> None:
        r = self._call(c, "GET", "/api/v1/leases?state=active", "list")
        if r is None or r.status_code != 200:
            return
        data = r.json()
        rows = data.get("results", data) if isinstance(data, dict) else data
        for row in rows[:2]:
            if isinstance(row, dict) and row.get("state") == "active":
                self._call(c, "POST", f"/api/v1/leases/{row['id']}/release", "release",
                           {"reason": "load"})

    def errors(self) -> list[Answer]:
        return [a for a in self.answers if not clean(a)]


def clean(a: Answer) -> bool:
    if 200 <= a.status < 300:
        return True
    if 400 <= a.status < 500:
        return a.detail.lstrip().startswith("{")  # the API's JSON error, not a crash page
    return False
