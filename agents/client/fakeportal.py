"""An in-memory portal implementing the server side of protocol v1.

Used by tests (as an ``httpx.MockTransport`` handler), the simulator and the demo. It is
the executable reference for the semantics the Django side must have: one-time bootstrap
tokens, hashed per-node credentials with rotation overlap, 401/403/400 error bodies,
idempotent ingestion keyed by (node_id, seq), desired state with generations and
long-poll.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from agents import protocol


def _hash(credential: str) -> str:
    return hashlib.sha256(credential.encode()).hexdigest()


@dataclass
class FakeNode:
    node_id: str
    hostname: str
    role: str
    credential_hashes: dict[str, float] = field(default_factory=dict)  # hash -> valid until
    seqs: set[int] = field(default_factory=set)
    reports: list[dict[str, Any]] = field(default_factory=list)
    desired: dict[str, Any] | None = None
    generation: int = 0


class FakePortal:
    def __init__(self, clock: Any = time.time, heartbeat_interval_s: int = 10) -> None:
        self.clock = clock
        self.heartbeat_interval_s = heartbeat_interval_s
        self.bootstrap_tokens: dict[str, int] = {}  # token -> remaining uses (one-time = 1)
        self.nodes: dict[str, FakeNode] = {}
        self.up = True
        self.rejected: list[dict[str, Any]] = []
        self.request_count = 0
        self.rotation_overlap_s = 3600.0
        self._cond = threading.Condition()

    # --- operator side ---------------------------------------------------------------
    def issue_bootstrap_token(self, uses: int = 1) -> str:
        token = "gpb_" + secrets.token_urlsafe(24)
        self.bootstrap_tokens[token] = uses
        return token

    def set_desired(self, node_id: str, **state: Any) -> int:
        with self._cond:
            node = self.nodes[node_id]
            node.generation += 1
            node.desired = {
                "protocol": protocol.PROTOCOL_VERSION,
                "node_id": node_id,
                "generation": node.generation,
                "issued_at": datetime.now(UTC).isoformat(),
                **state,
            }
            self._cond.notify_all()
            return node.generation

    def revoke(self, node_id: str) -> None:
        self.nodes[node_id].credential_hashes.clear()

    def node_by_hostname(self, hostname: str) -> FakeNode:
        return next(n for n in self.nodes.values() if n.hostname == hostname)

    # --- HTTP ------------------------------------------------------------------------
    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        if not self.up:
            raise httpx.ConnectError("portal down (simulated)", request=request)
        self.request_count += 1
        path = request.url.path
        try:
            if path == protocol.ENROL_PATH and request.method == "POST":
                return self._enrol(request)
            parts = path.removeprefix(protocol.API_PREFIX + "/nodes/").split("/")
            if len(parts) != 2:
                return _err("not_found", "no such endpoint")
            node = self._authenticate(request)
            if node is None:
                return _err("unauthenticated", "missing, invalid or revoked credential")
            if node.node_id != parts[0]:
                return _err("forbidden", "this credential belongs to another node")
            if parts[1] == "reports" and request.method == "POST":
                return self._report(node, request)
            if parts[1] == "desired-state" and request.method == "GET":
                return self._desired(node, request)
            if parts[1] == "credential" and request.method == "POST":
                return self._rotate(node)
            return _err("not_found", "no such endpoint")
        except _BadJson:
            return _err("invalid_json", "body is not a JSON object")

    def _enrol(self, request: httpx.Request) -> httpx.Response:
        body = _json(request)
        problems = protocol.validate_enrol(body)
        if problems:
            return _err("invalid_request", "invalid enrolment", problems)
        token = body["bootstrap_token"]
        with self._cond:
            if self.bootstrap_tokens.get(token, 0) <= 0:
                return _err("invalid_bootstrap_token", "unknown or already used bootstrap token")
            self.bootstrap_tokens[token] -= 1  # consumed by this enrolment
        node_id = "nd_" + secrets.token_hex(8)
        credential = "gpn_" + secrets.token_urlsafe(32)
        node = FakeNode(node_id, body["hostname"], body["role"])
        node.credential_hashes[_hash(credential)] = float("inf")
        with self._cond:
            self.nodes[node_id] = node
        return httpx.Response(201, json={
            "protocol": 1, "node_id": node_id, "credential": credential,
            "heartbeat_interval_s": self.heartbeat_interval_s,
            "long_poll_timeout_s": 30,
        })  # fmt: skip

    def _authenticate(self, request: httpx.Request) -> FakeNode | None:
        header = request.headers.get(protocol.AUTH_HEADER, "")
        if not header.startswith("Bearer "):
            return None
        digest, now = _hash(header[len("Bearer ") :]), self.clock()
        for node in self.nodes.values():
            until = node.credential_hashes.get(digest)
            if until is not None and until > now:
                return node
        return None

    def _report(self, node: FakeNode, request: httpx.Request) -> httpx.Response:
        body = _json(request)
        problems = protocol.validate_report(body)
        if not problems and body["node_id"] != node.node_id:
            return _err("forbidden", "report is for another node")
        if problems:
            self.rejected.append({"node_id": node.node_id, "problems": problems})
            return _err("invalid_report", f"{len(problems)} problem(s)", problems)
        seq = body["seq"]
        status = "duplicate" if seq in node.seqs else "accepted"
        if status == "accepted":
            node.seqs.add(seq)
            node.reports.append(body)
        return httpx.Response(200, json={
            "protocol": 1, "seq": seq, "status": status, "desired_generation": node.generation,
        })  # fmt: skip

    def _desired(self, node: FakeNode, request: httpx.Request) -> httpx.Response:
        try:
            after = int(request.url.params.get("after_generation", "-1"))
            wait = min(float(request.url.params.get("wait", "0")), protocol.MAX_LONG_POLL_S)
        except ValueError:
            return _err("invalid_request", "after_generation and wait must be numbers")
        deadline = time.monotonic() + wait
        with self._cond:
            while node.generation <= after and time.monotonic() < deadline:
                self._cond.wait(max(0.0, deadline - time.monotonic()))
            if node.generation <= after or node.desired is None:
                return httpx.Response(204)
            return httpx.Response(200, json=node.desired)

    def _rotate(self, node: FakeNode) -> httpx.Response:
        overlap_until = self.clock() + self.rotation_overlap_s
        for digest, until in list(node.credential_hashes.items()):
            node.credential_hashes[digest] = min(until, overlap_until)
        credential = "gpn_" + secrets.token_urlsafe(32)
        node.credential_hashes[_hash(credential)] = float("inf")
        return httpx.Response(201, json={
            "protocol": 1, "credential": credential,
            "previous_valid_until": datetime.fromtimestamp(overlap_until, UTC).isoformat(),
        })  # fmt: skip


class _BadJson(Exception):
    pass


def _json(request: httpx.Request) -> Any:
    try:
        body = json.loads(request.content or b"null")
    except ValueError as exc:
        raise _BadJson from exc
    if not isinstance(body, dict):
        raise _BadJson
    return body


def _err(code: str, message: str, details: list[protocol.Problem] | None = None) -> httpx.Response:
    return httpx.Response(
        protocol.ERROR_CODES[code], json=protocol.error_body(code, message, details)
    )


def serve(portal: FakePortal, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """Serve the fake portal over real HTTP on loopback (demo, simulator tests)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            request = httpx.Request(self.command, f"http://fake{self.path}",
                                    headers=dict(self.headers.items()), content=body)  # fmt: skip
            try:
                response = portal.handle(request)
            except httpx.ConnectError:
                self.close_connection = True
                return
            payload = response.content
            self.send_response(response.status_code)
            if payload:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = _handle

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True, name="fake-portal").start()
    return server
