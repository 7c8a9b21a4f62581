"""An in-memory portal implementing the server side of protocol v1 (``agents.protocol``).

Used by tests (as an ``httpx.MockTransport`` handler), the simulator and the demo. It
answers as the Django side does (tests/agents/test_protocol_contract.py runs one scenario
against both and compares every status code and body shape): bootstrap tokens bound to
a host-name pattern and a role (403 ``enrolment_refused``), a takeover of an enrolled
host held for approval (409 ``pending_approval`` with ``Retry-After``), hashed per-node
credentials with rotation overlap, the same request schemas and error bodies (§4), an
optional per-secret token bucket (429 ``rate_limited`` with ``Retry-After``; off unless
``rate_limit`` is set, with the keys of the portal's ``GPUPOOL_AGENT_RATE_LIMIT``),
idempotent ingestion keyed by (node_id, seq), desired state with generations and
long-poll.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import math
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
class FakeToken:
    uses: int  # remaining uses (one-time = 1)
    hostname: str = "*"  # fnmatch pattern, lower case
    role: str | None = None  # None: either role (the portal's tokens always name one)
    allow_reenrol: bool = False
    enrolled: dict[str, float] = field(default_factory=dict)  # node_id -> when


@dataclass
class FakeHold:
    """An enrolment that would take over an enrolled host, waiting for the operator."""

    hostname: str
    role: str
    state: str = "pending"  # "pending" | "approved" | "denied"


@dataclass
class FakeNode:
    node_id: str
    hostname: str
    role: str
    machine_id: str = ""
    credential_hashes: dict[str, float] = field(default_factory=dict)  # hash -> valid until
    seqs: set[int] = field(default_factory=set)
    reports: list[dict[str, Any]] = field(default_factory=list)
    urgent_seqs: list[int] = field(default_factory=list)  # reports sent with Priority u<=2
    desired: dict[str, Any] | None = None
    generation: int = 0
    rotate_requested: bool = False


class FakePortal:
    def __init__(self, clock: Any = time.time, heartbeat_interval_s: int = 10,
                 long_poll_timeout_s: int = 30) -> None:
        self.clock = clock
        self.heartbeat_interval_s = heartbeat_interval_s  # a test may change them: a fleet
        self.long_poll_timeout_s = long_poll_timeout_s  # that grew (§8)
        self.bootstrap_tokens: dict[str, FakeToken] = {}
        self.holds: dict[str, FakeHold] = {}  # bootstrap token -> held takeover
        self.nodes: dict[str, FakeNode] = {}
        self.pending_retry_s = 60
        self.enrol_retry_s = 600.0  # GPUPOOL_AGENT_ENROL_RETRY_S
        self.rate_limit: dict[str, float] | None = None  # GPUPOOL_AGENT_RATE_LIMIT's keys
        self._buckets: dict[str, float] = {}  # secret digest -> theoretical arrival time
        self.up = True
        self.rejected: list[dict[str, Any]] = []
        self.request_count = 0
        self.rotation_overlap_s = 3600.0
        self._cond = threading.Condition()

    # --- operator side ---------------------------------------------------------------
    def issue_bootstrap_token(self, uses: int = 1, hostname: str = "*",
                              role: str | None = None, allow_reenrol: bool = False) -> str:
        """A token for ``uses`` hosts named like ``hostname`` (fnmatch) in ``role``."""
        token = "gpb_" + secrets.token_urlsafe(24)
        self.bootstrap_tokens[token] = FakeToken(uses, hostname.lower(), role, allow_reenrol)
        return token

    def decide_enrolment(self, hostname: str, approve: bool) -> None:
        """The operator approves (or denies) the held takeover of ``hostname``."""
        for hold in self.holds.values():
            if hold.hostname == hostname and hold.state == "pending":
                hold.state = "approved" if approve else "denied"

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
            if (allowed := _allowed_method(path)) and request.method != allowed:
                return httpx.Response(405, headers={"Allow": allowed})
            if path == protocol.ENROL_PATH:
                return self._enrol(request)
            parts = path.removeprefix(protocol.API_PREFIX + "/nodes/").split("/")
            if len(parts) != 2 or not path.startswith(protocol.API_PREFIX + "/nodes/"):
                return _err("not_found", "no such endpoint")
            if parts[1] == "reports" and request.method == "POST":
                node = self._authenticate(request, parts[0])
                return self._report(node, request)
            if parts[1] == "desired-state" and request.method == "GET":
                return self._desired(request, parts[0])
            if parts[1] == "credential" and request.method == "POST":
                node = self._authenticate(request, parts[0])
                _body(request, protocol.CREDENTIAL, "invalid_request")
                return self._rotate(node)
            return _err("not_found", "no such endpoint")
        except _Refusal as refusal:
            return refusal.response

    def _enrol(self, request: httpx.Request) -> httpx.Response:
        body = _body(request, protocol.ENROL, "invalid_request")
        token = body["bootstrap_token"]
        self._throttle("enrol", token)
        with self._cond:
            grant = self.bootstrap_tokens.get(token)
            if grant is None:
                raise _refused()
            hold = self.holds.get(token)
            if hold is not None:
                return self._held(hold, token, body)
            if grant.uses <= 0:
                return self._retry(grant, body)
            _check_binding(grant, body)
            if self._enrolled(body) is not None and not grant.allow_reenrol:
                self.holds[token] = FakeHold(body["hostname"], body["role"])
                raise self._pending()
            grant.uses -= 1  # consumed by this enrolment
            response = self._complete(body)
            grant.enrolled[response.json()["node_id"]] = self.clock()
            return response

    def _retry(self, grant: FakeToken, body: dict[str, Any]) -> httpx.Response:
        """A used token again: the same host whose first answer was lost (it never
        reported) within ``enrol_retry_s`` gets a fresh credential, others 401."""
        key = (body["hostname"], body["role"], str(body.get("machine_id") or ""))
        for node_id, when in grant.enrolled.items():
            node = self.nodes.get(node_id)
            if node is not None and not node.seqs and self.clock() - when <= self.enrol_retry_s \
                    and (node.hostname, node.role, node.machine_id) == key:
                node.credential_hashes.clear()  # the lost answer's credential is revoked
                return self._answer(node, self._credential(node))
        raise _refused()

    def _held(self, hold: FakeHold, token: str, body: dict[str, Any]) -> httpx.Response:
        if (hold.hostname, hold.role) != (body["hostname"], body["role"]):
            raise _refused()
        if hold.state == "pending":
            raise self._pending()
        if hold.state == "denied":
            raise _Refusal(_err("enrolment_denied", "an operator denied this enrolment"))
        del self.holds[token]
        self.bootstrap_tokens[token].uses -= 1
        old = self._enrolled(body)
        if old is not None:  # the takeover replaces the old identity
            del self.nodes[old.node_id]
        return self._complete(body)

    def _pending(self) -> _Refusal:
        return _Refusal(_err("pending_approval", "this host would replace an enrolled agent: "
                             "an operator must approve it; retry later with the same token",
                             retry_after=self.pending_retry_s))

    def _enrolled(self, body: dict[str, Any]) -> FakeNode | None:
        return next((n for n in self.nodes.values()
                     if (n.hostname, n.role) == (body["hostname"], body["role"])), None)

    def _complete(self, body: dict[str, Any]) -> httpx.Response:
        node = FakeNode("nd_" + secrets.token_hex(8), body["hostname"], body["role"],
                        str(body.get("machine_id") or ""))
        self.nodes[node.node_id] = node
        return self._answer(node, self._credential(node))

    def _credential(self, node: FakeNode) -> str:
        credential = "gpn_" + secrets.token_urlsafe(32)
        node.credential_hashes[_hash(credential)] = float("inf")
        return credential

    def _answer(self, node: FakeNode, credential: str) -> httpx.Response:
        return httpx.Response(201, json={
            "protocol": protocol.PROTOCOL_VERSION, "node_id": node.node_id,
            "credential": credential, "heartbeat_interval_s": self.heartbeat_interval_s,
            "long_poll_timeout_s": self.long_poll_timeout_s,
        })  # fmt: skip

    def _throttle(self, scope: str, secret: str) -> None:
        """The portal's GCRA token bucket per secret (portal/fleet/api/throttle.py)."""
        config = self.rate_limit
        if not config or not secret or not config.get("enabled", True):
            return
        prefix = "enrol_" if scope == "enrol" else ""
        rate, burst = float(config[f"{prefix}rate_per_s"]), max(1, int(config[f"{prefix}burst"]))
        if rate <= 0:
            return
        key, now, interval = f"{scope}:{_hash(secret)}", self.clock(), 1.0 / rate
        with self._cond:
            tat = max(self._buckets.get(key, now), now)
            wait = tat + interval - burst * interval - now
            if wait <= 0:
                self._buckets[key] = tat + interval
                return
        retry = max(1, math.ceil(wait))
        raise _Refusal(_err("rate_limited", f"too many requests; retry in {retry} s",
                            retry_after=retry))

    def _authenticate(self, request: httpx.Request, node_id: str) -> FakeNode:
        """429 over the credential's rate, 401 unknown/revoked, 403 another node's (§2)."""
        header = request.headers.get(protocol.AUTH_HEADER, "")
        node = None
        if header.startswith("Bearer "):
            raw = header[len("Bearer ") :].strip()
            self._throttle("agent", raw)
            node = self._node_for(raw)
        if node is None:
            raise _Refusal(_err("unauthenticated",
                                "missing, invalid, expired or revoked credential"))
        if node.node_id != node_id:
            raise _Refusal(_err("forbidden", "this credential belongs to another node"))
        return node

    def _node_for(self, raw: str) -> FakeNode | None:
        digest, now = _hash(raw), self.clock()
        for node in list(self.nodes.values()):
            until = node.credential_hashes.get(digest)
            if until is not None and until > now:
                return node
        return None

    def _report(self, node: FakeNode, request: httpx.Request) -> httpx.Response:
        try:
            body = _body(request, protocol.REPORT, "invalid_report")
        except _Refusal as refusal:
            self.rejected.append({"node_id": node.node_id, "problems": refusal.details})
            raise
        if body["node_id"] != node.node_id:
            return _err("forbidden", "report is for another node")
        seq = body["seq"]
        status = "duplicate" if seq in node.seqs else "accepted"
        if status == "accepted":
            node.seqs.add(seq)
            node.reports.append(body)
            if request.headers.get(protocol.PRIORITY_HEADER) == protocol.URGENT_PRIORITY:
                node.urgent_seqs.append(seq)
        rotate, node.rotate_requested = node.rotate_requested, False
        return httpx.Response(200, json={
            "protocol": protocol.PROTOCOL_VERSION, "seq": seq, "status": status,
            "desired_generation": node.generation, "rotate_credential": rotate,
            "heartbeat_interval_s": self.heartbeat_interval_s,
            "long_poll_timeout_s": self.long_poll_timeout_s,
        })  # fmt: skip

    def _desired(self, request: httpx.Request, node_id: str) -> httpx.Response:
        values, problems = protocol.schema.parse_query(request.url.params,
                                                       protocol.DESIRED_QUERY)
        if problems:
            return _err("invalid_request", f"{len(problems)} problem(s)", problems)
        node = self._authenticate(request, node_id)
        after, wait = int(values["after_generation"]), float(values["wait"])
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
            "protocol": protocol.PROTOCOL_VERSION, "credential": credential,
            "previous_valid_until": datetime.fromtimestamp(overlap_until, UTC).isoformat(),
        })  # fmt: skip


class _Refusal(Exception):
    """A protocol error answer (§4), raised from anywhere in a request's handling."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(response.status_code)
        self.response = response

    @property
    def details(self) -> list[protocol.Problem]:
        details: list[protocol.Problem] = self.response.json()["error"]["details"]
        return details


def _allowed_method(path: str) -> str | None:
    """The one method of an endpoint (any other is 405, as Django's views answer)."""
    if path == protocol.ENROL_PATH:
        return "POST"
    prefix = protocol.API_PREFIX + "/nodes/"
    parts = path.removeprefix(prefix).split("/") if path.startswith(prefix) else []
    if len(parts) != 2:
        return None
    return {"reports": "POST", "credential": "POST", "desired-state": "GET"}.get(parts[1])


def _refused() -> _Refusal:
    return _Refusal(_err("invalid_bootstrap_token", "unknown, used or expired bootstrap token"))


def _check_binding(grant: FakeToken, body: dict[str, Any]) -> None:
    if grant.role is not None and grant.role != body["role"]:
        raise _Refusal(_err("enrolment_refused", f"this bootstrap token enrols {grant.role} "
                            "agents", [{"field": "role",
                                        "problem": "not allowed by this bootstrap token"}]))
    if not fnmatch.fnmatchcase(body["hostname"].lower(), grant.hostname):
        raise _Refusal(_err("enrolment_refused", "this bootstrap token is not valid for this "
                            "host name", [{"field": "hostname",
                                           "problem": "not allowed by this bootstrap token"}]))


def _body(request: httpx.Request, spec: protocol.schema.Spec, code: str) -> dict[str, Any]:
    """The body checked as the portal checks it: a JSON object, this protocol version,
    then ``spec``'s problems under ``code``."""
    try:
        body = json.loads(request.content or b"null")
    except ValueError:
        raise _Refusal(_err("invalid_json", "body is not valid JSON",
                            [{"field": "$", "problem": "not valid UTF-8 JSON"}])) from None
    if not isinstance(body, dict):
        raise _Refusal(_err("invalid_json", "body is not a JSON object"))
    if "protocol" in body and body["protocol"] != protocol.PROTOCOL_VERSION:
        raise _Refusal(_err("unsupported_protocol", f"unsupported protocol "
                            f"{str(body['protocol'])[:20]!r}; this server speaks 1"))
    if problems := protocol.schema.problems(spec, body):
        raise _Refusal(_err(code, f"{len(problems)} problem(s)", problems))
    return body


def _err(code: str, message: str, details: list[protocol.Problem] | None = None,
         retry_after: int | None = None) -> httpx.Response:
    headers = {} if retry_after is None else {protocol.RETRY_AFTER_HEADER: str(retry_after)}
    return httpx.Response(protocol.ERROR_CODES[code], headers=headers,
                          json=protocol.error_body(code, message, details))


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
            if retry_after := response.headers.get(protocol.RETRY_AFTER_HEADER):
                self.send_header(protocol.RETRY_AFTER_HEADER, retry_after)
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
