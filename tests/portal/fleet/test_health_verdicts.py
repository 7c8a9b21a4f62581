"""Issue 27: the health policy applied to reports over the agent wire — a fatal verdict
fences its part, a warning only alerts — and the circuit breaker that holds automatic
fencing when a large share of the fleet trips at once."""

from __future__ import annotations

from typing import Any

import pytest

from portal.core.models import AuditLog
from portal.fleet.models import NodeHealth
from portal.fleet.services import faults
from portal.inventory.models import Gpu, Node, Service
from tests.portal.fleet.helpers import gpu, port, report, sample

pytestmark = pytest.mark.django_db


def _enrolled(agent_client: Any) -> Node:
    agent_client.enrol()
    node = Node.objects.get(hostname="gpu-node-01")
    for i in range(2):
        Gpu.objects.get_or_create(node=node, index=i, defaults={
            "uuid": f"GPU-x-{i}", "model": "H100"})
    agent_client.report(report(agent_client.node_id, 1, telemetry=[sample(ts=100.0)]))
    return node


def _send(agent_client: Any, seq: int, **kw: Any) -> None:
    resp = agent_client.report(report(agent_client.node_id, seq,
                                      telemetry=[sample(ts=100.0 + seq, **kw)]))
    assert resp.status_code in (200, 202), resp.content


def _alerts(node: Node) -> list[str]:
    return [a["key"] for a in NodeHealth.objects.get(node=node).alerts]


def test_a_double_bit_ecc_error_sends_the_gpu_to_repair(agent_client: Any) -> None:
    node = _enrolled(agent_client)
    _send(agent_client, 2, gpus=[gpu(0), gpu(1, ecc_uncorrected_volatile=2)])
    bad = Gpu.objects.get(node=node, index=1)
    assert bad.service == Service.OUT_OF_SERVICE and bad.service_cause.startswith("ecc_dbe")
    assert Gpu.objects.get(node=node, index=0).service == Service.IN_SERVICE


def test_a_thermal_slowdown_only_alerts(agent_client: Any) -> None:
    node = _enrolled(agent_client)
    _send(agent_client, 2, gpus=[gpu(0), gpu(1, clocks_event_reasons=0x40)])
    assert Gpu.objects.get(node=node, index=1).service == Service.IN_SERVICE
    assert "gpu:1:thermal" in _alerts(node)


def test_xid_94_restarts_the_application_only(agent_client: Any) -> None:
    node = _enrolled(agent_client)
    _send(agent_client, 2, gpus=[gpu(0), gpu(1, last_xid=94)],
          xids=[{"gpu_uuid": "GPU-x-1", "xid": 94, "ts": 102.0}])
    one = Gpu.objects.get(node=node, index=1)
    assert one.service == Service.IN_SERVICE and one.health == Gpu.Health.HEALTHY


def test_one_symbol_error_alerts_a_burst_fences(agent_client: Any) -> None:
    node = _enrolled(agent_client)
    counters = {"link_downed": 0, "symbol_error": 0, "port_rcv_errors": 0}
    _send(agent_client, 2, ports=[port(counters={**counters, "symbol_error": 1})])
    node.refresh_from_db()
    assert node.service == Service.IN_SERVICE
    _send(agent_client, 3, ports=[port(counters={**counters, "symbol_error": 500})])
    node.refresh_from_db()
    assert node.service == Service.OUT_OF_SERVICE


def test_the_circuit_breaker_holds_when_40_percent_of_the_fleet_trips() -> None:
    nodes = [Node.objects.create(hostname=f"n{i:02d}") for i in range(10)]
    fenced = [faults.node_failed(node=n, cause="xid 79", rule="xid.79") for n in nodes[:4]]
    assert all(fenced)  # under the breaker's minimum: each one fenced
    held = [faults.node_failed(node=n, cause="xid 79", rule="xid.79") for n in nodes[4:8]]
    assert not any(held)
    states = [Node.objects.get(pk=n.pk).service for n in nodes[4:8]]
    assert states == [Service.SUSPECT] * 4  # cordoned, not fenced: a person decides
    assert AuditLog.objects.filter(action="fleet.circuit_open").count() == 4
