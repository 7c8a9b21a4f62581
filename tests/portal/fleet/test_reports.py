from __future__ import annotations

import logging
import time
from datetime import timedelta

import pytest

from agents import __version__ as AGENT_VERSION
from agents import protocol
from portal.core import clock
from portal.fleet import selectors, services
from portal.fleet.models import (
    AgentReport,
    GpuTelemetry,
    NodeHealth,
    NodeObservedState,
    PortTelemetry,
    TelemetrySample,
)
from portal.fleet.services.health import health_sweep
from portal.fleet.services.samples import telemetry_purge
from portal.inventory.models import Gpu, Node
from tests.portal.fleet.helpers import gpu, port, report, sample

STORED = (AgentReport, GpuTelemetry, PortTelemetry, TelemetrySample, NodeObservedState)


def counts() -> dict[str, int]:
    return {m.__name__: m.objects.count() for m in STORED}


@pytest.mark.django_db
def test_enrol_report_desired_round_trip(agent_client) -> None:
    agent_client.enrol()
    node = Node.objects.get(hostname="gpu-node-01")
    resp = agent_client.report(report(agent_client.node_id, 1))
    assert resp.status_code == 200, resp.content
    assert resp.json() == {"protocol": 1, "seq": 1, "status": "accepted",
                           "desired_generation": 0, "rotate_credential": False,
                           "heartbeat_interval_s": 10, "long_poll_timeout_s": 30}
    node.refresh_from_db()
    assert node.last_heartbeat is not None and node.agent_version == AGENT_VERSION
    assert GpuTelemetry.objects.filter(node=node).count() == 2
    assert PortTelemetry.objects.get(node=node).state_id == 4
    part = {"name": "tenant_acme", "pkey": "0x0101", "membership": "full", "ipoib": True,
            "port_guids": ["0x0002c90300000001"]}
    gen = services.node_desired_set(node=node, partitions=[part], access_grants=[])
    assert agent_client.report(report(agent_client.node_id, 2)).json()["desired_generation"] \
        == gen
    doc = agent_client.desired(after=0)
    assert doc.status_code == 200 and doc.json()["generation"] == gen
    assert doc.json()["node_id"] == agent_client.node_id
    assert agent_client.desired(after=gen).status_code == 204
    observed = report(agent_client.node_id, 3, generation_applied=gen)
    observed["observed"]["partitions"] = [{"device": "mlx5_0", "port": 1, "in_sync": True,
                                           "pkeys": ["0xffff", "0x8101"]}]
    assert agent_client.report(observed).status_code == 200
    assert selectors.node_converged(node=node, generation=gen)
    observed["seq"] = 4
    observed["observed"]["partitions"][0]["in_sync"] = False
    agent_client.report(observed)
    assert not selectors.node_converged(node=node, generation=gen)


@pytest.mark.django_db
def test_resent_report_is_not_double_counted(agent_client) -> None:
    agent_client.enrol()
    body = report(agent_client.node_id, 7, telemetry=[sample(ts=1_795_909_200.0)])
    assert agent_client.report(body).json()["status"] == "accepted"
    before = counts()
    again = agent_client.report(body)
    assert again.status_code == 200 and again.json()["status"] == "duplicate"
    assert counts() == before
    assert AgentReport.objects.filter(seq=7).count() == 1
    lower = report(agent_client.node_id, 5, telemetry=[sample(ts=1_795_909_100.0)])
    assert agent_client.report(lower).json()["status"] == "accepted"  # a gap is fine


@pytest.mark.django_db
def test_history_is_one_row_per_gpu_per_minute(agent_client) -> None:
    agent_client.enrol()
    base = 1_795_909_200.0  # a minute boundary
    samples = [sample(ts=base + 10 * i) for i in range(12)]  # two minutes
    agent_client.report(report(agent_client.node_id, 1, telemetry=samples[:7]))
    agent_client.report(report(agent_client.node_id, 2, telemetry=samples[7:]))
    gpu_rows = TelemetrySample.objects.filter(kind="gpu")
    assert gpu_rows.count() == 2 * 2  # 2 GPUs x 2 minutes
    assert TelemetrySample.objects.filter(kind="port").count() == 2
    assert gpu_rows.first().values["power_w"] == 300.5
    clock.freeze(clock.now() + timedelta(days=400))
    assert telemetry_purge()["samples"] == 6
    assert TelemetrySample.objects.count() == 0 and AgentReport.objects.count() == 0


@pytest.mark.django_db
def test_node_cannot_touch_another_nodes_data(agent_client, other_agent) -> None:
    agent_client.enrol("gpu-node-01")
    other_agent.enrol("gpu-node-02")
    victim = agent_client.node_id
    resp = other_agent.report(report(victim, 1), node_id=victim)
    assert resp.status_code == 403 and resp.json()["error"]["code"] == "forbidden"
    resp = other_agent.report(report(victim, 1))  # own URL, another node's body
    assert resp.status_code == 403
    assert other_agent.desired(node_id=victim).status_code == 403
    rotate = other_agent.post(f"/api/agent/v1/nodes/{victim}/credential", {"protocol": 1})
    assert rotate.status_code == 403
    assert AgentReport.objects.count() == 0


BAD = [
    ("not json", "invalid_json", None),
    ("[1, 2]", "invalid_json", None),
    ({"protocol": 2}, "unsupported_protocol", None),
    ("seq-missing", "invalid_report", {"field": "seq", "problem": "is required"}),
    ("negative-power", "invalid_report",
     {"field": "telemetry[0].gpus[1].power_w", "problem": "must be >= 0"}),
    ("bad-guid", "invalid_report",
     {"field": "telemetry[0].ib_ports[0].port_guid",
      "problem": "must be 0x + 16 lowercase hex digits"}),
]


def _bad_body(kind: object, node_id: str) -> object:
    body = report(node_id, 1)
    if kind == "seq-missing":
        del body["seq"]
    elif kind == "negative-power":
        body["telemetry"][0]["gpus"][1]["power_w"] = -1
    elif kind == "bad-guid":
        body["telemetry"][0]["ib_ports"][0]["port_guid"] = "0xABC"
    else:
        return kind
    return body


@pytest.mark.django_db
@pytest.mark.parametrize(("kind", "code", "detail"), BAD)
def test_malformed_report_400_logged_nothing_stored(agent_client, caplog, kind, code,
                                                    detail) -> None:
    agent_client.enrol()
    before = counts()
    with caplog.at_level(logging.WARNING, logger="portal.fleet.agent_api"):
        resp = agent_client.report(_bad_body(kind, agent_client.node_id))
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["code"] == code and error["message"]
    if detail:
        assert detail in error["details"]
        assert error["message"] == f"{len(error['details'])} problem(s)"
    assert counts() == before
    assert any(code in r.getMessage() for r in caplog.records)


@pytest.mark.django_db
def test_xid_79_marks_gpu_lost_and_alerts(agent_client) -> None:
    agent_client.enrol()
    node = Node.objects.get(hostname="gpu-node-01")
    Gpu.objects.create(node=node, index=0, uuid="GPU-x-0", model="H100")
    Gpu.objects.create(node=node, index=1, uuid="GPU-x-1", model="H100")
    bad = gpu(1, healthy=False, lost=True, last_xid=79, unhealthy_reasons=["xid 79"])
    tel = [sample(gpus=[gpu(0), bad], xids=[{"gpu_uuid": "GPU-x-1", "xid": 79, "ts": 1.0}])]
    assert agent_client.report(report(agent_client.node_id, 1, telemetry=tel)).status_code \
        == 200
    assert Gpu.objects.get(node=node, index=1).health == Gpu.Health.LOST
    assert Gpu.objects.get(node=node, index=0).health == Gpu.Health.HEALTHY
    problems = selectors.hardware_problems_for([node.pk])
    assert [p["key"] for p in problems] == ["gpu:1"]
    assert "xid 79" in problems[0]["message"].lower()  # the policy row names it


@pytest.mark.django_db
def test_xid_48_quarantines(agent_client) -> None:
    agent_client.enrol()
    node = Node.objects.get(hostname="gpu-node-01")
    Gpu.objects.create(node=node, index=0, uuid="GPU-x-0", model="H100")
    tel = [sample(gpus=[gpu(0, healthy=False, last_xid=48)])]
    agent_client.report(report(agent_client.node_id, 1, telemetry=tel))
    assert Gpu.objects.get(node=node, index=0).health == Gpu.Health.QUARANTINED


@pytest.mark.django_db
def test_ib_link_down_and_error_increase_raise_alerts(agent_client) -> None:
    agent_client.enrol()
    node = Node.objects.get(hostname="gpu-node-01")
    agent_client.report(report(agent_client.node_id, 1, telemetry=[sample(ts=100.0)]))
    assert NodeHealth.objects.get(node=node).alerts == []
    down = port(state="DOWN", state_id=1, phys_state="Polling", phys_state_id=2,
                counters={"link_downed": 1, "symbol_error": 0, "port_rcv_errors": 0})
    agent_client.report(report(agent_client.node_id, 2,
                               telemetry=[sample(ts=110.0, ports=[down])]))
    keys = {a["key"] for a in NodeHealth.objects.get(node=node).alerts}
    assert keys == {"port:mlx5_0:1:link", "port:mlx5_0:1:errors"}
    agent_client.report(report(agent_client.node_id, 3, telemetry=[sample(
        ts=120.0, ports=[port(counters={"link_downed": 1, "symbol_error": 0,
                                        "port_rcv_errors": 0})])]))
    keys = {a["key"] for a in NodeHealth.objects.get(node=node).alerts}
    assert keys == {"port:mlx5_0:1:errors"}  # link back up; the increase stays until cleared


@pytest.mark.django_db
def test_heartbeat_timeout_flags_unreachable_then_recovers(agent_client, settings) -> None:
    settings.GPUPOOL_AGENT_UNREACHABLE_AFTER_S = 30
    agent_client.enrol()
    node = Node.objects.get(hostname="gpu-node-01")
    agent_client.report(report(agent_client.node_id, 1))
    assert health_sweep() == 0
    clock.advance(timedelta(seconds=31))
    assert health_sweep() == 1
    assert health_sweep() == 0  # idempotent
    health = NodeHealth.objects.get(node=node)
    assert not health.reachable and health.unreachable_since is not None
    assert selectors.unreachable_node_ids() == {node.pk}
    node.refresh_from_db()
    assert node.state == Node.State.READY  # Node.state is staff's to change
    assert [p["key"] for p in selectors.hardware_problems_for([node.pk])] == ["unreachable"]
    agent_client.report(report(agent_client.node_id, 2))
    assert NodeHealth.objects.get(node=node).reachable
    assert selectors.hardware_problems_for([node.pk]) == []


@pytest.mark.django_db
def test_long_poll_204_at_deadline_and_200_when_newer(agent_client) -> None:
    agent_client.enrol()
    node = Node.objects.get(hostname="gpu-node-01")
    started = time.monotonic()
    assert agent_client.desired(after=0, wait=1).status_code == 204
    assert 0.9 <= time.monotonic() - started < 5
    gen = services.node_desired_set(node=node, partitions=[], access_grants=[])
    started = time.monotonic()
    resp = agent_client.desired(after=0, wait=30)
    assert resp.status_code == 200 and resp.json()["generation"] == gen
    assert time.monotonic() - started < 1
    bad = agent_client.desired(after=0, wait=protocol.MAX_LONG_POLL_S + 1)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"
    assert agent_client.desired(credential="gpn_x").status_code == 401


@pytest.mark.django_db
def test_gpu_utilisation_from_history(agent_client) -> None:
    from datetime import UTC, datetime

    agent_client.enrol()
    node = Node.objects.get(hostname="gpu-node-01")
    base = 1_795_909_200.0
    for i, util in enumerate((20, 40, 60)):
        tel = [sample(ts=base + 60 * i, gpus=[gpu(0, gpu_util_pct=util), gpu(1)])]
        agent_client.report(report(agent_client.node_id, i + 1, telemetry=tel))
    start = datetime.fromtimestamp(base, UTC)
    end = datetime.fromtimestamp(base + 180, UTC)
    got = selectors.gpu_utilisation(gpus=[(node.pk, 0), (node.pk, 1)], start=start, end=end)
    assert got == {(node.pk, 0): 40.0, (node.pk, 1): 50.0}


@pytest.mark.django_db
def test_full_spool_report_above_django_upload_limit_is_accepted(agent_client,
                                                                 settings) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100_000
    agent_client.enrol()
    pad = "x" * 2000  # unknown fields are ignored (and kept in the latest row's data)
    tel = [sample(ts=1_795_909_200.0 + 10 * i,
                  gpus=[gpu(j, note=pad) for j in range(8)]) for i in range(120)]
    body = report(agent_client.node_id, 1, telemetry=tel)
    resp = agent_client.report(body)
    assert resp.status_code == 200, resp.content[:200]
    assert TelemetrySample.objects.filter(kind="gpu").count() == 8 * 20
    settings.GPUPOOL_AGENT_MAX_BODY_BYTES = 1000
    resp = agent_client.report(report(agent_client.node_id, 2))
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_request"
