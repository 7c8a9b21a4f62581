"""Contract test (issue 12): one agent scenario against the fake portal and the real one.

The same requests — enrol (and its retry after a lost answer), long-poll the desired state, apply it, report, rotate the
credential, and the refusals (400 with field paths, 401, 403, 404, 409 pending_approval
and 429, both with ``Retry-After``; 405 for a wrong method) — go over loopback HTTP once to
``agents.client.fakeportal`` and once to the Django portal (``live_server``). Every answer
is reduced to its status, its body's shape (keys and JSON types; error codes, field paths
and problems kept as values) and its ``Retry-After`` (messages are prose: only their type counts), and the two transcripts must be
equal; each is also checked against the statuses the protocol prescribes, so both sides
being wrong in the same way fails too.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import httpx
import pytest

from agents import protocol
from agents.client.fakeportal import FakePortal, serve

HOST = "gpu-node-01"
LIMITS = {"rate_per_s": 20.0, "burst": 200, "enrol_rate_per_s": 0.5, "enrol_burst": 20}
TIGHT = {**LIMITS, "enrol_rate_per_s": 0.01, "enrol_burst": 1}
PENDING_RETRY_S = 7
GRANT = {"lease_id": "ls_ab12", "account": "lease-ab12", "gpu_indices": [0],
         "ssh_authorized_keys": ["ssh-ed25519 AAAAC3Nza alice@example.org"],
         "not_after": "2030-01-01T00:00:00+00:00"}
Entry = tuple[str, int, Any, int | None]


class Side(Protocol):
    """What the scenario needs of a portal besides its HTTP API: the operator's hand."""

    url: str

    def token(self, hostname: str, role: str = "node") -> str: ...
    def set_desired(self, hostname: str) -> int: ...
    def decide(self, hostname: str, approve: bool) -> None: ...
    def limit(self, config: dict[str, float]) -> None: ...


# --- the two sides -----------------------------------------------------------------
class FakeSide:
    def __init__(self, portal: FakePortal, url: str) -> None:
        self.portal, self.url = portal, url
        portal.pending_retry_s = PENDING_RETRY_S
        portal.rate_limit = dict(LIMITS)

    def token(self, hostname: str, role: str = "node") -> str:
        return self.portal.issue_bootstrap_token(hostname=hostname, role=role)

    def set_desired(self, hostname: str) -> int:
        node = self.portal.node_by_hostname(hostname)
        return self.portal.set_desired(node.node_id, partitions=[], access_grants=[GRANT])

    def decide(self, hostname: str, approve: bool) -> None:
        self.portal.decide_enrolment(hostname, approve)

    def limit(self, config: dict[str, float]) -> None:
        self.portal.rate_limit = dict(config)


class RealSide:
    def __init__(self, url: str, settings: Any, staff: Any) -> None:
        self.url, self.settings, self.staff = url, settings, staff
        settings.GPUPOOL_AGENT_PENDING_RETRY_S = PENDING_RETRY_S
        settings.GPUPOOL_AGENT_RATE_LIMIT = dict(LIMITS)

    def token(self, hostname: str, role: str = "node") -> str:
        from portal.fleet.services.enrolment import bootstrap_token_create

        return bootstrap_token_create(actor=None, hostname=hostname, role=role)[1]

    def set_desired(self, hostname: str) -> int:
        from portal.fleet.services import node_desired_set
        from portal.inventory.models import Node

        return node_desired_set(node=Node.objects.get(hostname=hostname), partitions=[],
                                access_grants=[GRANT])

    def decide(self, hostname: str, approve: bool) -> None:
        from portal.fleet.models import EnrolmentRequest
        from portal.fleet.services.approval import enrolment_decide

        held = EnrolmentRequest.objects.get(hostname=hostname, state="pending")
        enrolment_decide(actor=self.staff, request_id=held.pk, approve=approve)

    def limit(self, config: dict[str, float]) -> None:
        self.settings.GPUPOOL_AGENT_RATE_LIMIT = dict(config)


@contextmanager
def fake_side() -> Iterator[FakeSide]:
    """The fake portal over real HTTP on a free loopback port of 35000–35999."""
    portal = FakePortal()
    for port in secrets.SystemRandom().sample(range(35000, 36000), 50):
        try:
            server = serve(portal, port=port)
        except OSError:
            continue
        try:
            yield FakeSide(portal, f"http://127.0.0.1:{server.server_address[1]}")
        finally:
            server.shutdown()
            server.server_close()
        return
    raise RuntimeError("no free port in 35000-35999")


# --- what is compared ----------------------------------------------------------------
def shape(value: Any) -> Any:
    """Keys and JSON types; an ack's ``status`` is kept as a value."""
    if isinstance(value, dict):
        return {k: value[k] if k == "status" else shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [shape(item) for item in value]
    return type(value).__name__


def answer(response: httpx.Response) -> Any:
    if not response.content:
        return None
    body = response.json()
    if set(body) != {"error"}:
        return shape(body)
    error = body["error"]
    return {"code": error["code"], "message": type(error["message"]).__name__,
            "details": [(d["field"], d["problem"]) for d in error["details"]],
            "keys": sorted(error)}


class Agent:
    """Raw protocol v1 requests, recorded as (step, status, answer, Retry-After)."""

    def __init__(self, side: Side) -> None:
        self.side, self.http = side, httpx.Client(base_url=side.url, timeout=30)
        self.transcript: list[Entry] = []
        self.node_id = self.credential = ""
        self.last: dict[str, Any] = {}

    def record(self, step: str, response: httpx.Response) -> httpx.Response:
        retry = response.headers.get(protocol.RETRY_AFTER_HEADER)
        self.transcript.append((step, response.status_code, answer(response),
                                None if retry is None else int(retry)))
        self.last = response.json() if response.content else {}
        return response

    def enrol(self, step: str, token: str, hostname: str = HOST, role: str = "node",
              **extra: Any) -> httpx.Response:
        body = {"protocol": 1, "bootstrap_token": token, "role": role, "hostname": hostname,
                "agent_version": "0.1.0", "inventory": {}, **extra}
        response = self.record(step, self.http.post(protocol.ENROL_PATH, json=body))
        if response.status_code == 201:
            self.node_id, self.credential = self.last["node_id"], self.last["credential"]
        return response

    def post(self, step: str, path: str, body: Any, credential: str | None = None,
             node_id: str | None = None) -> httpx.Response:
        url = path.format(node_id=node_id or self.node_id)
        content = body if isinstance(body, bytes) else None
        return self.record(step, self.http.post(
            url, json=None if content is not None else body, content=content,
            headers=self._auth(credential)))

    def desired(self, step: str, after: Any, wait: Any, credential: str | None = None,
                ) -> httpx.Response:
        url = protocol.DESIRED_STATE_PATH.format(node_id=self.node_id)
        return self.record(step, self.http.get(url, params={"after_generation": after,
                                                            "wait": wait},
                                               headers=self._auth(credential)))

    def _auth(self, credential: str | None) -> dict[str, str]:
        cred = self.credential if credential is None else credential
        return {protocol.AUTH_HEADER: f"Bearer {cred}"} if cred else {}


def report(node_id: str, seq: int, generation: int, **extra: Any) -> dict[str, Any]:
    return {"protocol": 1, "node_id": node_id, "seq": seq,
            "created_at": "2026-12-01T10:00:00+00:00", "agent_version": "0.1.0",
            "dropped_reports": 0, "observed": {"generation_applied": generation},
            "telemetry": [{"ts": time.time(), "host": {"hostname": HOST},
                           "gpus": [{"index": 0, "healthy": True, "power_w": 300.5}],
                           "ib_ports": []}], **extra}


# --- the scenario ----------------------------------------------------------------------
def scenario(side: Side) -> list[Entry]:
    agent = Agent(side)
    _refused_enrolments(agent, side)
    token = side.token(HOST)
    agent.enrol("enrol", token)
    _lost_answer(agent, token)
    generation = _desired_state(agent, side)
    _reports(agent, generation)
    _rotation(agent, generation)
    agent.enrol("bootstrap token used again", token)
    _takeover(agent, side)
    _rate_limit(agent, side)
    agent.record("enrol: GET", agent.http.get(protocol.ENROL_PATH))
    agent.record("reports: GET", agent.http.get(
        protocol.REPORTS_PATH.format(node_id=agent.node_id), headers=agent._auth(None)))
    agent.record("unknown endpoint", agent.http.get(protocol.API_PREFIX + "/nodes/x/nothing"))
    agent.http.close()
    return agent.transcript


def _refused_enrolments(agent: Agent, side: Side) -> None:
    agent.record("enrol: not JSON", agent.http.post(protocol.ENROL_PATH, content=b"{"))
    agent.record("enrol: not an object", agent.http.post(protocol.ENROL_PATH, json=[1]))
    agent.enrol("enrol: protocol 2", "gpb_x", protocol=2)
    agent.record("enrol: field problems", agent.http.post(protocol.ENROL_PATH, json={
        "protocol": 1, "role": "king", "hostname": "not a host", "machine_id": "x" * 65}))
    agent.enrol("enrol: unknown token", "gpb_" + secrets.token_urlsafe(24))
    agent.enrol("enrol: another host", side.token(HOST), hostname="gpu-node-02")
    agent.enrol("enrol: another role", side.token(HOST), role="fabric")


def _lost_answer(agent: Agent, token: str) -> None:
    """The first answer never reached the host: the same token again, before any report,
    enrols the same node with a fresh credential and revokes the lost one."""
    node_id, lost = agent.node_id, agent.credential
    agent.enrol("enrol: retry before the first report", token)
    assert agent.node_id == node_id and agent.credential != lost
    agent.desired("desired: the lost answer's credential", -1, 0, credential=lost)


def _desired_state(agent: Agent, side: Side) -> int:
    agent.desired("desired: nothing yet", -1, 0)
    agent.desired("desired: bad query", "x", 999)
    answers: dict[str, httpx.Response] = {}
    url = protocol.DESIRED_STATE_PATH.format(node_id=agent.node_id)
    waiter = threading.Thread(target=lambda: answers.update(doc=httpx.get(
        side.url + url, params={"after_generation": 0, "wait": 20}, timeout=30,
        headers=agent._auth(None))))
    waiter.start()
    time.sleep(0.5)
    generation = side.set_desired(HOST)
    waiter.join(timeout=25)
    document = agent.record("desired: long-poll woken", answers["doc"]).json()
    assert protocol.validate_desired_state(document, "node") == []  # the agent applies it
    assert document["generation"] == generation and document["access_grants"] == [GRANT]
    agent.desired("desired: nothing newer", generation, 0.3)
    agent.desired("desired: bad credential", 0, 0, credential="gpn_nope")
    return generation


def _reports(agent: Agent, generation: int) -> None:
    path = protocol.REPORTS_PATH
    agent.post("report: applied", path, report(agent.node_id, 1, generation))
    assert agent.last["desired_generation"] == generation
    agent.post("report: again", path, report(agent.node_id, 1, generation))
    bad = report(agent.node_id, 0, generation)
    bad["telemetry"][0]["gpus"][0].update(index=40_000, power_w=-1)  # past the storage bound
    agent.post("report: field problems", path, bad)
    agent.post("report: protocol 2", path, {**report(agent.node_id, 2, generation), "protocol": 2})
    agent.post("report: for another node", path, report("nd_other", 2, generation))
    agent.post("report: no credential", path, report(agent.node_id, 2, generation), "")
    agent.post("report: unknown credential", path, report(agent.node_id, 2, generation), "gpn_x")
    agent.post("report: another node's path", path, report("nd_other", 2, generation),
               node_id="nd_other")


def _rotation(agent: Agent, generation: int) -> None:
    old = agent.credential
    agent.post("rotate: protocol 2", protocol.CREDENTIAL_PATH, {"protocol": 2})
    agent.post("rotate", protocol.CREDENTIAL_PATH, {"protocol": 1})
    agent.credential = agent.last["credential"]
    agent.post("report: new credential", protocol.REPORTS_PATH,
               report(agent.node_id, 3, generation))
    agent.post("report: old credential, in the overlap", protocol.REPORTS_PATH,
               report(agent.node_id, 4, generation), old)


def _takeover(agent: Agent, side: Side) -> None:
    old = agent.credential
    token = side.token(HOST)
    agent.enrol("takeover: held", token)
    agent.enrol("takeover: still held", token)
    side.decide(HOST, approve=True)
    agent.enrol("takeover: approved", token)
    agent.post("report: the replaced credential", protocol.REPORTS_PATH,
               report(agent.node_id, 1, 0), old)
    denied = side.token(HOST)
    agent.enrol("takeover: held again", denied)
    side.decide(HOST, approve=False)
    agent.enrol("takeover: denied", denied)


def _rate_limit(agent: Agent, side: Side) -> None:
    side.limit(TIGHT)
    bogus = "gpb_" + secrets.token_urlsafe(24)
    agent.enrol("enrol: within the limit", bogus)
    agent.enrol("enrol: over the limit", bogus)
    side.limit(LIMITS)


EXPECTED = [
    ("enrol: not JSON", 400), ("enrol: not an object", 400), ("enrol: protocol 2", 400),
    ("enrol: field problems", 400), ("enrol: unknown token", 401),
    ("enrol: another host", 403), ("enrol: another role", 403), ("enrol", 201),
    ("enrol: retry before the first report", 201),
    ("desired: the lost answer's credential", 401),
    ("desired: nothing yet", 204), ("desired: bad query", 400),
    ("desired: long-poll woken", 200), ("desired: nothing newer", 204),
    ("desired: bad credential", 401), ("report: applied", 200), ("report: again", 200),
    ("report: field problems", 400), ("report: protocol 2", 400),
    ("report: for another node", 403), ("report: no credential", 401),
    ("report: unknown credential", 401), ("report: another node's path", 403),
    ("rotate: protocol 2", 400), ("rotate", 201), ("report: new credential", 200),
    ("report: old credential, in the overlap", 200), ("bootstrap token used again", 401),
    ("takeover: held", 409), ("takeover: still held", 409), ("takeover: approved", 201),
    ("report: the replaced credential", 401), ("takeover: held again", 409),
    ("takeover: denied", 403), ("enrol: within the limit", 401),
    ("enrol: over the limit", 429), ("enrol: GET", 405), ("reports: GET", 405),
    ("unknown endpoint", 404),
]


def _check_prescribed(transcript: list[Entry]) -> None:
    assert [(step, status) for step, status, _, _ in transcript] == EXPECTED
    by_step = {step: (body, retry) for step, _, body, retry in transcript}
    assert by_step["takeover: held"] == (
        {"code": "pending_approval", "message": "str", "details": [],
         "keys": ["code", "details", "message"]}, PENDING_RETRY_S)
    over, retry = by_step["enrol: over the limit"]
    assert over["code"] == "rate_limited" and retry is not None and 90 <= retry <= 100
    assert {f for f, _ in by_step["report: field problems"][0]["details"]} == {
        "seq", "telemetry[0].gpus[0].index", "telemetry[0].gpus[0].power_w"}
    assert by_step["report: again"][0]["status"] == "duplicate"


@pytest.fixture
def real_side(live_server: Any, settings: Any, django_user_model: Any) -> Iterator[RealSide]:
    from portal.fleet import wakeup

    staff = django_user_model.objects.create_user("operator", "op@example.org", "x",
                                                  is_staff=True)
    yield RealSide(live_server.url, settings, staff)
    if wakeup.HUB.running():  # the long-poll's LISTEN connection, before the DB is dropped
        wakeup.stop()


def _run(make: Callable[[], Any]) -> list[Entry]:
    with make() as side:
        return scenario(side)


@pytest.mark.services("postgres")
@pytest.mark.django_db(transaction=True)
def test_fake_portal_answers_the_agent_scenario_as_the_real_portal(real_side: RealSide) -> None:
    fake = _run(fake_side)
    real = scenario(real_side)
    _check_prescribed(real)
    _check_prescribed(fake)
    differ = [(f, r) for f, r in zip(fake, real, strict=True) if f != r]
    assert differ == [], "\n".join(f"fake {f}\nreal {r}" for f, r in differ)


def test_fake_portal_follows_the_prescribed_statuses_alone() -> None:
    """Without PostgreSQL the fake side still runs the scenario and meets the protocol."""
    _check_prescribed(_run(fake_side))
