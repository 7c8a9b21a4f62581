"""Issue 10, finding 6: hostile agent API input is a 400 naming the field, never a 500,
and stores nothing. One test per measured case, named after it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from agents import __version__ as AGENT_VERSION
from portal.fleet.models import AgentReport, GpuTelemetry
from portal.fleet.services.enrolment import bootstrap_token_create
from portal.inventory.models import Node
from tests.portal.fleet.conftest import BASE, AgentClient
from tests.portal.fleet.helpers import gpu, report, sample


@pytest.fixture
def agent() -> AgentClient:
    """An enrolled agent whose test client renders a server error as a 500 answer."""
    client = AgentClient(Client(raise_request_exception=False))
    assert client.enrol("gpu-node-01").status_code == 201
    return client


def _problem(resp: Any, field: str) -> str:
    assert resp.status_code == 400, (resp.status_code, resp.content[:300])
    details = resp.json()["error"]["details"]
    matching = [d["problem"] for d in details if d["field"] == field]
    assert matching, details
    return matching[0]


def _nothing_stored(agent: AgentClient) -> None:
    assert not AgentReport.objects.filter(agent__agent_id=agent.node_id).exists()
    assert not GpuTelemetry.objects.exists()


@pytest.mark.django_db
def test_agent_api_rejects_out_of_range_seq(agent: AgentClient) -> None:
    resp = agent.report(report(agent.node_id, 2**63))
    assert _problem(resp, "seq") == f"must be <= {2**63 - 1}"
    assert resp.json()["error"]["code"] == "invalid_report"
    _nothing_stored(agent)
    assert agent.report(report(agent.node_id, 2**63 - 1)).status_code == 200  # the edge fits


@pytest.mark.django_db
def test_agent_api_rejects_out_of_range_generation(agent: AgentClient) -> None:
    body = report(agent.node_id, 1)
    body["observed"]["generation_applied"] = 10**30
    assert _problem(agent.report(body), "observed.generation_applied").startswith("must be <=")
    body["observed"]["generation_applied"] = 1e30
    assert _problem(agent.report(body), "observed.generation_applied") == "must be an integer"
    _nothing_stored(agent)
    resp = agent.client.get(f"{BASE}/nodes/{agent.node_id}/desired-state",
                            {"after_generation": str(10**30)},
                            HTTP_AUTHORIZATION=f"Bearer {agent.credential}")
    assert _problem(resp, "after_generation").startswith("must be <=")
    resp = agent.client.get(f"{BASE}/nodes/{agent.node_id}/desired-state",
                            {"after_generation": "1e30"},
                            HTTP_AUTHORIZATION=f"Bearer {agent.credential}")
    assert _problem(resp, "after_generation") == "must be an integer"


@pytest.mark.django_db
def test_agent_api_rejects_out_of_range_gpu_index(agent: AgentClient) -> None:
    resp = agent.report(report(agent.node_id, 1, telemetry=[sample(gpus=[gpu(2**40)])]))
    assert _problem(resp, "telemetry[0].gpus[0].index") == "must be <= 32767"
    _nothing_stored(agent)
    inventory = {"gpus": [{"index": 2**40, "uuid": "GPU-x", "name": "NVIDIA H100"}]}
    fresh = AgentClient(Client(raise_request_exception=False))
    assert _problem(fresh.enrol("gpu-node-02", inventory=inventory),
                    "inventory.gpus[0].index") == "must be <= 32767"
    assert not Node.objects.filter(hostname="gpu-node-02").exists()


@pytest.mark.django_db
def test_agent_api_rejects_nan_timestamp(agent: AgentClient) -> None:
    text = json.dumps(report(agent.node_id, 1, telemetry=[sample(ts=float("nan"))]))
    assert "NaN" in text
    assert _problem(agent.report(text), "telemetry[0].ts") == "must be a finite number"
    _nothing_stored(agent)


@pytest.mark.django_db
def test_agent_api_rejects_infinity(agent: AgentClient) -> None:
    for value in ("Infinity", "-Infinity", "1e400"):
        body = report(agent.node_id, 1, telemetry=[sample(ts=1_800_000_000.0,
                                                          gpus=[gpu(0, power_w=0.123456789)])])
        text = json.dumps(body).replace("0.123456789", value)
        resp = agent.report(text)
        assert _problem(resp, "telemetry[0].gpus[0].power_w") == "must be a finite number"
    body = report(agent.node_id, 1, telemetry=[sample(ts=1_800_000_000.0,
                                                      gpus=[gpu(0, future_field=0.123456789)])])
    resp = agent.report(json.dumps(body).replace("0.123456789", "Infinity"))  # unknown too
    assert _problem(resp, "telemetry[0].gpus[0].future_field") == "must be a finite number"
    _nothing_stored(agent)


@pytest.mark.django_db
def test_agent_api_rejects_50000_deep_json(agent: AgentClient) -> None:
    deep = "[" * 50_000 + "]" * 50_000
    resp = agent.report(f'{{"protocol": 1, "x": {deep}}}')
    assert _problem(resp, "$").startswith("nested deeper than")
    resp = agent.post(f"{BASE}/enrol", deep, credential="")
    assert _problem(resp, "$").startswith("nested deeper than")
    body = report(agent.node_id, 1)
    body["observed"]["partitions"] = [{"x": json.loads("[" * 40 + "]" * 40)}]
    assert _problem(agent.report(body), "observed.partitions[0].x" + "[0]" * 28) \
        == "nested deeper than 32 levels"
    _nothing_stored(agent)


@pytest.mark.django_db
def test_agent_api_rejects_10000_character_hostname() -> None:
    client = AgentClient(Client(raise_request_exception=False))
    token = bootstrap_token_create(actor=None, hostname="h*")[1]
    resp = client.enrol("h" * 10_000, token=token)
    assert _problem(resp, "hostname") == "at most 253 characters"
    assert _problem(client.enrol("h_bad!", token=token), "hostname") == \
        "must be a DNS host name (RFC 1123)"
    assert not Node.objects.exists()


@pytest.mark.django_db
def test_agent_api_rejects_non_numeric_inventory() -> None:
    client = AgentClient(Client(raise_request_exception=False))
    inventory = {"host": {"cpus": "lots", "memory_total_bytes": "2TB"},
                 "gpus": [{"index": 0, "memory_total_bytes": "80GB"}],
                 "ib_ports": [{"port": "one", "port_guid": "0x0002c903000e0b72"}]}
    resp = client.enrol("gpu-node-03", inventory=inventory)
    assert _problem(resp, "inventory.host.cpus") == "must be an integer"
    assert _problem(resp, "inventory.host.memory_total_bytes") == "must be an integer"
    assert _problem(resp, "inventory.gpus[0].memory_total_bytes") == "must be an integer"
    assert _problem(resp, "inventory.ib_ports[0].port") == "must be an integer"
    assert not Node.objects.exists()


@pytest.mark.django_db
def test_agent_api_rejects_nul_and_lone_surrogates(agent: AgentClient) -> None:
    body = report(agent.node_id, 1)
    body["agent_version"] = "0.1\x00"
    assert _problem(agent.report(body), "agent_version").startswith("must not contain NUL")
    text = json.dumps(report(agent.node_id, 1)).replace(AGENT_VERSION, "\\ud800")
    assert _problem(agent.report(text), "agent_version").startswith("must not contain NUL")
    body = report(agent.node_id, 1)  # a low surrogate in an unknown key (found by the fuzz)
    body["telemetry"][0]["gpus"][0]["a\udfffb"] = True
    resp = agent.report(json.dumps(body))
    assert _problem(resp, "telemetry[0].gpus[0]").startswith("keys must not contain NUL")
    _nothing_stored(agent)


@pytest.mark.django_db
def test_agent_api_rejects_oversized_body(agent: AgentClient, settings: Any) -> None:
    settings.GPUPOOL_AGENT_MAX_BODY_BYTES = 1000
    resp = agent.report(report(agent.node_id, 1, telemetry=[sample()] * 10))
    assert _problem(resp, "$") == "at most 1000 bytes"
    _nothing_stored(agent)


@pytest.mark.django_db
def test_agent_api_rejects_bad_long_poll_wait(agent: AgentClient) -> None:
    for wait, problem in (("nan", "must be a finite number"), ("inf", "must be a finite number"),
                          ("121", "must be <= 120"), ("-1", "must be >= 0"),
                          ("soon", "must be a number")):
        assert _problem(agent.desired(wait=wait), "wait") == problem  # type: ignore[arg-type]


@pytest.mark.django_db
def test_agent_api_rejects_duplicate_gpu_index_in_inventory() -> None:
    client = AgentClient(Client(raise_request_exception=False))
    inventory = {"gpus": [{"index": 0, "uuid": "GPU-a"}, {"index": 0, "uuid": "GPU-b"}]}
    resp = client.enrol("gpu-node-04", inventory=inventory)
    assert _problem(resp, "inventory.gpus[1].index") == "must be unique in the array"
    assert not Node.objects.filter(hostname="gpu-node-04").exists()


@pytest.mark.django_db
def test_unknown_agent_endpoint_is_a_protocol_404() -> None:
    client = Client(raise_request_exception=False, enforce_csrf_checks=True)
    for path in (f"{BASE}/nodes//desired-state", f"{BASE}/nodes/x/reports/", f"{BASE}/nope"):
        for resp in (client.get(path), client.post(path, "{}", content_type="application/json")):
            assert resp.status_code == 404 and resp.json()["error"]["code"] == "not_found"
