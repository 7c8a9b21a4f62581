"""A real HTTP receiver on 127.0.0.1 that checks every signature with its own copy of the
Standard Webhooks algorithm, and helpers that drive deliveries eagerly."""

from __future__ import annotations

import base64
import hashlib
import hmac
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.utils import timezone

from portal.webhooks import services, tasks
from portal.webhooks.models import Message

PORT = 18105
TOLERANCE_S = 5 * 60


def spec_verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """The spec's check, written independently of portal.webhooks.signing."""
    msg_id, ts = headers["webhook-id"], headers["webhook-timestamp"]
    if abs(time.time() - int(ts)) > TOLERANCE_S:
        return False
    key = base64.b64decode(secret[len("whsec_"):])
    mac = hmac.new(key, msg_id.encode() + b"." + ts.encode() + b"." + body, hashlib.sha256)
    want = base64.b64encode(mac.digest()).decode()
    given = [s.split(",", 1)[1] for s in headers["webhook-signature"].split(" ")
             if s.startswith("v1,")]
    return any(hmac.compare_digest(want, g) for g in given)


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    port: int
    received: list[Received] = field(default_factory=list)
    script: dict[str, list[int]] = field(default_factory=dict)  # path -> codes, then 200
    redirects: dict[str, str] = field(default_factory=dict)  # path -> Location (307)

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def at(self, path: str) -> list[Received]:
        return [r for r in self.received if r.path == path]


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            receiver.received.append(Received(self.path, {k.lower(): v for k, v in
                                                          self.headers.items()}, body))
            if self.path in receiver.redirects:
                self.send_response(307)
                self.send_header("Location", receiver.redirects[self.path])
                self.end_headers()
                return
            codes = receiver.script.get(self.path) or []
            code = codes.pop(0) if codes else 200
            self.send_response(code)
            self.send_header("content-type", "text/plain")
            self.end_headers()
            self.wfile.write(b"x" * 1_000_000 if self.path == "/big"
                             else f"answer {code}".encode())

        def log_message(self, *args: Any) -> None:
            pass
    return Handler


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    rec = Receiver(port=PORT)
    server = ThreadingHTTPServer(("127.0.0.1", PORT), _handler(rec))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield rec
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def fast_schedule(settings: Any) -> None:
    settings.GPUPOOL_WEBHOOKS_SCHEDULE_S = [0, 0.2, 0.4]
    settings.GPUPOOL_WEBHOOKS_TIMEOUT_S = 3
    settings.GPUPOOL_WEBHOOKS_ALLOW_PRIVATE = True


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, float]]:
    """Celery sends (message id, countdown), recorded instead of queued."""
    calls: list[tuple[str, float]] = []
    monkeypatch.setattr(services, "send_task",
                        lambda message_id, countdown=0: calls.append((message_id, countdown)))
    return calls


def drive(capture: Any, *, limit: int = 20) -> int:
    """Run the delivery task eagerly for every pending message, waiting until each try is
    due, until nothing is pending; answers the number of tries made."""
    tries = 0
    for _ in range(limit):
        pending = list(Message.objects.filter(status=Message.Status.PENDING)
                       .order_by("next_attempt_at"))
        if not pending:
            return tries
        wait = (pending[0].next_attempt_at - timezone.now()).total_seconds()
        if wait > 0:
            time.sleep(wait)
        with capture(execute=True):
            if tasks.deliver.apply(args=[str(pending[0].pk)]).get() != "skipped":
                tries += 1
    return tries
