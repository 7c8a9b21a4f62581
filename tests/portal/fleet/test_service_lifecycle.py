"""Issue 27: the service lifecycle of nodes and GPUs (in service → suspect → repair →
validating → in service), driven over the agent wire: silence, XIDs and a port down send
hardware to repair; a node's own validation run brings it back, unless it flaps."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from portal.core import clock
from portal.core.models import AuditLog
from portal.fleet import lifecycle
from portal.fleet.models import NodeDesiredState, NodeValidation, ServiceEvent
from portal.fleet.services import faults, validation
from portal.fleet.services.health import health_sweep
from portal.inventory.models import Gpu, Node, Service
from tests.portal.factories import make_user
from tests.portal.fleet.helpers import gpu, port, report, sample

S = Service
PAIRS = [(a, b) for a in S.values for b in S.values if a != b]


@pytest.mark.django_db
@pytest.mark.parametrize(("start", "to"), PAIRS)
def test_every_transition_is_allowed_and_audited_or_refused_unchanged(start: str,
                                                                      to: str) -> None:
    node = Node.objects.create(hostname="n1", service=start)
    if to in lifecycle.ALLOWED[start]:
        lifecycle.transition(node, to, cause="test", actor="ops")
        node.refresh_from_db()
        event = ServiceEvent.objects.get(node=node)
        assert (node.service, event.from_state, event.to_state) == (to, start, to)
        assert AuditLog.objects.filter(action=f"fleet.service.{to}").exists()
    else:
        with pytest.raises(lifecycle.IllegalServiceTransition):
            lifecycle.transition(node, to, cause="test")
        node.refresh_from_db()
        assert node.service == start and not ServiceEvent.objects.exists()


def _enrolled(agent_client: Any) -> Node:
    agent_client.enrol()
    node = Node.objects.get(hostname="gpu-node-01")
    for i in range(2):
        Gpu.objects.get_or_create(node=node, index=i, defaults={
            "uuid": f"GPU-gpu-node-01-{i}", "model": "H100"})
    agent_client.report(report(agent_client.node_id, 1, telemetry=[sample(ts=100.0)]))
    return node


def _validation_asked(node: Node) -> dict[str, Any] | None:
    return NodeDesiredState.objects.get(node=node).document.get("validation")


@pytest.mark.django_db
def test_a_silent_node_goes_to_repair_and_returns_only_after_it_validates(
        agent_client: Any, settings: Any) -> None:
    settings.GPUPOOL_AGENT_UNREACHABLE_AFTER_S = 30
    node = _enrolled(agent_client)
    clock.advance(timedelta(seconds=31))
    assert health_sweep() == 1
    node.refresh_from_db()
    assert node.service == S.OUT_OF_SERVICE and "silent" in node.service_cause
    agent_client.report(report(agent_client.node_id, 2, telemetry=[sample(ts=200.0)]))
    node.refresh_from_db()
    assert node.service == S.VALIDATING  # back, but not offered: proving itself first
    asked = _validation_asked(node)
    assert asked is not None and asked["level"] == 2
    result = {"id": asked["id"], "level": 2, "passed": True, "finished_at": 201.0,
              "checks": [{"name": "gpus_visible", "ok": True, "detail": "2 of 2"}]}
    body = report(agent_client.node_id, 3, telemetry=[sample(ts=210.0)])
    body["observed"]["validation"] = result
    resp = agent_client.report(body)
    assert resp.status_code in (200, 202), resp.content
    node.refresh_from_db()
    assert node.service == S.IN_SERVICE
    assert _validation_asked(node) is None
    assert NodeValidation.objects.get(node=node).passed is True


@pytest.mark.django_db
def test_a_failed_validation_sends_the_part_back_to_repair(agent_client: Any) -> None:
    node = _enrolled(agent_client)
    bad = Gpu.objects.get(node=node, index=1)
    faults.gpu_failed(gpu=bad, cause="xid 48", rule="xid.48")
    run = validation.validate(part=bad)
    result = {"id": run.request_id, "level": 2, "passed": False, "finished_at": 1.0,
              "checks": [{"name": "ecc", "ok": False, "gpu_index": 1,
                          "detail": "2 uncorrected volatile errors"},
                         {"name": "ecc", "ok": True, "gpu_index": 0, "detail": "0"}]}
    assert validation.observed(node=node, result=result)
    bad.refresh_from_db()
    assert bad.service == S.OUT_OF_SERVICE and "uncorrected" in bad.service_cause
    assert not validation.observed(node=node, result=result)  # a replay changes nothing


@pytest.mark.django_db
def test_a_flapping_part_stays_out_until_an_operator_returns_it(agent_client: Any) -> None:
    node = _enrolled(agent_client)
    bad = Gpu.objects.get(node=node, index=0)
    for _ in range(3):  # the policy's flap.max_fences
        faults.gpu_failed(gpu=bad, cause="xid 48", rule="xid.48")
        run = validation.validate(part=bad)
        validation.observed(node=node, result={"id": run.request_id, "passed": True,
                                               "finished_at": 1.0, "checks": []})
        bad.refresh_from_db()
    assert bad.service == S.VALIDATING and "flaps" in bad.service_cause
    staff = make_user("ops", staff=True)
    validation.operator_return(part=bad, actor=staff, reason="replaced the board")
    bad.refresh_from_db()
    assert bad.service == S.IN_SERVICE and bad.health == Gpu.Health.HEALTHY


@pytest.mark.django_db
@pytest.mark.parametrize(("xid", "part"), [(79, "node"), (48, "gpu")])
def test_critical_xids_over_the_wire_send_the_right_part_to_repair(
        agent_client: Any, xid: int, part: str) -> None:
    node = _enrolled(agent_client)
    events = [{"gpu_uuid": "GPU-gpu-node-01-1", "xid": xid, "ts": 150.0}]
    agent_client.report(report(agent_client.node_id, 2, telemetry=[sample(
        ts=150.0, gpus=[gpu(0, uuid="GPU-gpu-node-01-0"),
                        gpu(1, uuid="GPU-gpu-node-01-1", healthy=False, last_xid=xid)],
        xids=events)]))
    node.refresh_from_db()
    failed = Gpu.objects.get(node=node, index=1)
    if part == "node":
        assert node.service == S.OUT_OF_SERVICE and "79" in node.service_cause
    else:
        assert node.service == S.IN_SERVICE and failed.service == S.OUT_OF_SERVICE
        assert Gpu.objects.get(node=node, index=0).service == S.IN_SERVICE


@pytest.mark.django_db
def test_an_ib_port_down_sends_its_node_to_repair(agent_client: Any) -> None:
    node = _enrolled(agent_client)
    down = port(state="DOWN", state_id=1, phys_state="Disabled", phys_state_id=3)
    agent_client.report(report(agent_client.node_id, 2,
                               telemetry=[sample(ts=160.0, ports=[down])]))
    node.refresh_from_db()
    assert node.service == S.OUT_OF_SERVICE and "DOWN" in node.service_cause


@pytest.mark.django_db
def test_operator_actions_over_the_api() -> None:
    node = Node.objects.create(hostname="n1")
    staff, api = make_user("ops", staff=True), APIClient()
    api.force_authenticate(staff)
    url = f"/api/v1/fleet/nodes/{node.hostname}/service"
    resp = api.post(url, {"action": "cordon", "reason": "fan noise"}, format="json")
    assert resp.status_code == 200 and resp.json()["service"] == S.SUSPECT
    resp = api.post(url, {"action": "explode", "reason": "x"}, format="json")
    assert resp.status_code == 400 and "action" in resp.json()["fields"]
    resp = api.post(url, {"action": "return", "reason": "x"}, format="json")
    assert resp.status_code == 409  # never validated: not returned
    resp = api.post(url, {"action": "repair", "reason": "RMA the PSU"}, format="json")
    assert resp.status_code == 200 and resp.json()["service"] == S.OUT_OF_SERVICE
    queue = api.get("/api/v1/fleet/repair-queue").json()
    assert [(r["node"], r["service"]) for r in queue] == [("n1", S.OUT_OF_SERVICE)]
    history = api.get(url).json()
    assert [h["to_state"] for h in history] == [S.OUT_OF_SERVICE, S.SUSPECT]


@pytest.mark.django_db
def test_a_validation_still_running_settles_nothing(agent_client: Any) -> None:
    node = _enrolled(agent_client)
    faults.node_failed(node=node, cause="xid 79", rule="xid.79")
    run = validation.validate(part=node)
    running = {"id": run.request_id, "level": 2, "passed": False, "running": True,
               "checks": [], "started_at": 1.0}
    assert not validation.observed(node=node, result=running)
    node.refresh_from_db()
    assert node.service == S.VALIDATING
