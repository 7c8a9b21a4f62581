"""Issue 10.1: an unclean GPU is never re-leased. The node's teardown report carries
``observed.gpu_cleaning``; a GPU reported ``clean: false`` is quarantined (audited,
alerted) and the lease waiting for it goes back to the queue instead of being activated."""

from __future__ import annotations

from typing import Any

import pytest

from portal.console.services import gpu_set_health
from portal.core import clock
from portal.core.models import AuditLog
from portal.fleet import protocol
from portal.fleet.models import NodeHealth
from portal.fleet.services import agent_for_node
from portal.fleet.services.ingest import report_ingest
from portal.inventory.models import Gpu, HcaPort, Node
from portal.leasing.lifecycle import expiry, placing, provisioning, releasing
from portal.leasing.models import LeaseEvent
from portal.leasing.models import LeaseState as S
from portal.leasing.simulation import report_for
from tests.portal.factories import make_user
from tests.portal.leasing.test_handover import _back_to_back, generation, grant_id, granted, state

pytestmark = pytest.mark.services("postgres")


def _check(index: int, lease_id: str, clean: bool, at: float) -> dict[str, Any]:
    return {"gpu_index": index, "lease_id": lease_id, "clean": clean, "gpu_uuid": "",
            "processes": [] if clean else [{"pid": 4242, "name": "python"}],
            "killed": [], "reset": [], "not_reset": [], "checked_at": at}


def report_with_cleaning(node: Node, applied: int, checks: list[dict[str, Any]]) -> None:
    agent = agent_for_node(node=node)
    body = report_for(node, list(Gpu.objects.filter(node=node).order_by("index")),
                      list(HcaPort.objects.filter(node=node)), set(), agent.last_seq + 1,
                      clock.now(), applied, agent.agent_id)
    body["observed"]["gpu_cleaning"] = checks
    assert protocol.validate_report(body) == []
    report_ingest(agent=agent, body=body)


def test_unclean_gpu_is_quarantined_not_released(pool: dict[str, Any]) -> None:
    first, node, second = _back_to_back(pool)
    clock.advance(first.end_at - clock.now())
    assert provisioning.start_due_reservations() == 1
    provisioning.provision(second.pk)
    assert expiry.expire_due() == 1
    releasing.teardown(first.pk)
    checks = [_check(i, grant_id(first), i != 3, clock.now().timestamp()) for i in range(8)]
    report_with_cleaning(node, generation(node), checks)  # teardown applied; GPU 3 unclean
    assert state(first) == S.EXPIRED
    gpu3 = Gpu.objects.get(node=node, index=3)
    assert gpu3.health == Gpu.Health.QUARANTINED
    assert set(Gpu.objects.filter(node=node).exclude(index=3).values_list(
        "health", flat=True)) == {Gpu.Health.HEALTHY}
    assert state(second) == S.QUEUED  # moved, not handed the unclean GPU
    assert grant_id(second) not in granted(node)
    assert AuditLog.objects.filter(action="fleet.gpu_unclean").count() == 1
    assert any(a["key"] == "gpu:3" for a in NodeHealth.objects.get(node=node).alerts)
    placing.run_schedule_pass()  # 7 healthy GPUs left there: the 8-GPU lease waits
    report_with_cleaning(node, generation(node), checks)
    assert not LeaseEvent.objects.filter(lease=second, to_state=S.ACTIVE).exists()
    assert grant_id(second) not in granted(node)
    # staff release it; the same old check in later reports does not quarantine it again
    gpu_set_health(actor=make_user("ops", staff=True), gpu=gpu3, health=Gpu.Health.HEALTHY)
    report_with_cleaning(node, generation(node), checks)
    gpu3.refresh_from_db()
    assert gpu3.health == Gpu.Health.HEALTHY
    assert AuditLog.objects.filter(action="fleet.gpu_unclean").count() == 1


def test_clean_teardown_hands_the_gpus_over(pool: dict[str, Any]) -> None:
    first, node, second = _back_to_back(pool)
    clock.advance(first.end_at - clock.now())
    provisioning.start_due_reservations()
    provisioning.provision(second.pk)
    expiry.expire_due()
    releasing.teardown(first.pk)
    checks = [_check(i, grant_id(first), True, clock.now().timestamp()) for i in range(8)]
    report_with_cleaning(node, generation(node), checks)
    assert granted(node) == {grant_id(second): list(range(8))}
    report_with_cleaning(node, generation(node), checks)
    assert state(second) == S.ACTIVE
