"""Property test over the whole agent API (issue 10, finding 6): hostile bodies, query
strings and headers for every endpoint — enrol, reports, desired-state (long-poll),
credential — never produce a server error, and every refusal is a protocol error body.

Bounded for CI: ``GPUPOOL_FUZZ_EXAMPLES`` examples per endpoint (default 150; 15–30 s
on two cores)."""

from __future__ import annotations

import copy
import json
import os
from typing import Any
from urllib.parse import quote

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from portal.fleet import protocol
from portal.fleet.services.enrolment import bootstrap_token_create
from tests.portal.fleet.conftest import BASE, AgentClient
from tests.portal.fleet.helpers import gpu, port, report, sample

EXAMPLES = int(os.environ.get("GPUPOOL_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.data_too_large])

EDGE_INTS = st.sampled_from([0, -1, 1, 2**15 - 1, 2**15, 2**31 - 1, 2**31, 2**53 + 1,
                             2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**30, 2**40])
FLOATS = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [1e308, -1e308, 1e30, 5e-324, -0.0, 4_102_444_801.0])
STRINGS = st.text(max_size=40) | st.sampled_from(
    ["\x00", "\ud800", "a\udfffb", "x" * 300, "h" * 10_000, "", "0x" + "f" * 16, "💥" * 100,
     "nd_0123456789abcdef", "gpn_" + "A" * 43, "../../etc", "%00", "ssh-ed25519 AAAA\nx"])
SCALARS = st.none() | st.booleans() | EDGE_INTS | st.integers() | FLOATS | STRINGS
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(STRINGS, inner, max_size=4), max_leaves=16)
DEEP = st.integers(20, 70).map(lambda n: json.loads("[" * n + "]" * n))
HOSTILE = JSON | DEEP
RAW = st.binary(max_size=120) | st.sampled_from([
    b"[" * 50_000 + b"]" * 50_000, b'{"protocol": 1, "seq": 1e999}', b"\xff\xfe\x00",
    b"", b"null", b"{", b'{"protocol": NaN}', b'{"a": ' * 1000, b"1" * 5000])


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            out += _paths(value, (*prefix, i))
    return out


def _same_type(value: Any) -> st.SearchStrategy[Any]:
    if isinstance(value, bool):
        return st.booleans()
    if isinstance(value, int):
        return EDGE_INTS | st.integers(0, 2**16)
    if isinstance(value, float):
        return FLOATS | st.floats(0, 1e12)
    if isinstance(value, str):
        return STRINGS
    return HOSTILE


def _mutate(data: st.DataObject, doc: Any) -> Any:
    """Replace, delete or add a value at up to three random places of ``doc``."""
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(_paths(doc)))
        if not path:
            if data.draw(st.booleans()):
                return data.draw(HOSTILE)
            continue
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        op = data.draw(st.sampled_from(["same_type", "same_type", "replace", "delete", "add",
                                        "copy"]))
        if op == "same_type":  # an edge value of the right type: often accepted, then stored
            parent[path[-1]] = data.draw(_same_type(parent[path[-1]]))
        elif op == "replace":
            parent[path[-1]] = data.draw(HOSTILE)
        elif op == "delete":
            del parent[path[-1]]
        elif op == "copy" and isinstance(parent, list):  # a duplicate item (same index …)
            parent.append(copy.deepcopy(parent[path[-1]]))
        elif isinstance(parent, dict):
            parent[data.draw(STRINGS)] = data.draw(HOSTILE)
        else:
            parent.append(data.draw(HOSTILE))
    return doc


def _payload(data: st.DataObject, valid: dict[str, Any]) -> bytes | str:
    if data.draw(st.integers(0, 9)) == 0:
        return data.draw(RAW)
    return json.dumps(_mutate(data, valid), allow_nan=True)


def _answer_ok(resp: Any) -> None:
    assert resp.status_code < 500, (resp.status_code, resp.content[:400])
    if resp.status_code >= 400 and resp.status_code != 405:
        error = resp.json()["error"]
        assert error["code"] in protocol.ERROR_CODES, error
        assert all(isinstance(d["field"], str) and isinstance(d["problem"], str)
                   for d in error["details"])


@pytest.fixture
def enrolled(settings: Any) -> AgentClient:
    settings.GPUPOOL_AGENT_RATE_LIMIT = {"enabled": False}
    agent = AgentClient(Client(raise_request_exception=False))
    inventory = {"gpus": [{"index": 0, "uuid": "GPU-fuzz-0", "name": "NVIDIA H100"}]}
    assert agent.enrol("fuzz-node", inventory=inventory).status_code == 201
    return agent


@pytest.mark.django_db
@FUZZ
@given(data=st.data())
def test_fuzz_enrol_never_500(enrolled: AgentClient, data: st.DataObject) -> None:
    _, token = bootstrap_token_create(actor=None, hostname="fuzz-*")
    hostname = data.draw(st.sampled_from(["fuzz-new", "fuzz-node", "other-host"]))
    body = {"protocol": 1, "bootstrap_token": token, "role": "node", "hostname": hostname,
            "agent_version": "0.1.0", "machine_id": "m",
            "inventory": {"host": {"hostname": hostname, "cpus": 8,
                                   "memory_total_bytes": 2**30},
                          "gpus": [{"index": 0, "uuid": "GPU-a", "name": "NVIDIA H100",
                                    "memory_total_bytes": 2**36}],
                          "ib_ports": [{"device": "mlx5_0", "port": 1, "rate_gbps": 400.0,
                                        "port_guid": "0x0002c903000e0b99"}]}}
    _answer_ok(enrolled.post(f"{BASE}/enrol", _payload(data, body), credential=""))


@pytest.mark.django_db
@FUZZ
@given(data=st.data(), seq=st.integers(1, 10**6))
def test_fuzz_report_never_500(enrolled: AgentClient, data: st.DataObject, seq: int) -> None:
    body = report(enrolled.node_id, seq, telemetry=[sample(
        gpus=[gpu(0), gpu(1, last_xid=79, healthy=False)], ports=[port()],
        xids=[{"gpu_uuid": "GPU-x-1", "xid": 79, "ts": 1.0}])])
    _answer_ok(enrolled.report(_payload(data, body)))


def _query_text(data: st.DataObject) -> str:
    """A hostile query value that never makes the long-poll actually wait."""
    text = data.draw(st.sampled_from(["0", "-1", "1", "0.0", str(2**63 - 1), "00"])
                     | STRINGS | EDGE_INTS.map(str) | FLOATS.map(repr))
    text = text.encode("utf-8", "replace").decode()  # a URL carries bytes, not surrogates
    try:
        if 0 < float(text.strip()) <= protocol.MAX_LONG_POLL_S:
            return "0"
    except (ValueError, OverflowError):
        pass
    return text


@pytest.mark.django_db
@FUZZ
@given(data=st.data())
def test_fuzz_desired_state_never_500(enrolled: AgentClient, data: st.DataObject) -> None:
    params = {"after_generation": _query_text(data), "wait": _query_text(data)}
    node_id = data.draw(st.sampled_from([enrolled.node_id, "nd_other"]) | STRINGS)
    node_id = node_id.encode("utf-8", "replace").decode()
    header = data.draw(st.sampled_from([f"Bearer {enrolled.credential}", "", "Bearer ",
                                        "Basic x"])
                       | st.text(st.characters(min_codepoint=32, max_codepoint=126),
                                 max_size=80))
    path = f"{BASE}/nodes/{quote(node_id, safe='')}/desired-state"
    resp = enrolled.client.get(path, params, HTTP_AUTHORIZATION=header)
    _answer_ok(resp)


@pytest.mark.django_db
@FUZZ
@given(data=st.data())
def test_fuzz_credential_never_500(enrolled: AgentClient, data: st.DataObject) -> None:
    path = f"{BASE}/nodes/{enrolled.node_id}/credential"
    _answer_ok(enrolled.post(path, _payload(data, {"protocol": 1})))


@settings(max_examples=EXAMPLES * 2, deadline=None, database=None)
@given(data=st.data(), which=st.sampled_from(["report", "enrol"]))
def test_schema_fast_path_agrees_with_the_full_validation(data: st.DataObject,
                                                          which: str) -> None:
    from agents.protocol import schema

    if which == "report":
        spec, body = protocol.REPORT, report("nd_0123456789abcdef", 3, telemetry=[
            sample(ts=1.0, gpus=[gpu(0)], ports=[port()],
                   xids=[{"gpu_uuid": "GPU-x-0", "xid": 79, "ts": 1.0}])])
    else:
        spec, body = protocol.ENROL, {
            "protocol": 1, "bootstrap_token": "gpb_x", "role": "node", "hostname": "h-1",
            "agent_version": "1", "inventory": {"gpus": [{"index": 0}], "ib_ports": [{}]}}
    doc = _mutate(data, body)
    full: list[schema.Problem] = []
    spec.validate(doc, "", full)
    assert spec.ok(doc) == (not full), full
