"""Issue 31 (N-1 upgrades): the portal tells an agent of the previous release (0.1.0) from
a current one and never waits for what the old one cannot do. Found by the upgrade test's
work: both releases called themselves 0.1.0, and a repaired node of an old agent stayed
``validating`` for ever (the old agent ignores the desired ``validation`` request)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from agents import __version__ as AGENT_VERSION
from agents.protocol.features import FEATURES, parse_version
from portal.core import clock
from portal.fleet import protocol
from portal.fleet.models import NodeDesiredState, NodeValidation
from portal.fleet.services import faults, validation
from portal.fleet.services.health import health_sweep
from portal.inventory.models import Gpu, Node, Service
from tests.portal.factories import make_user
from tests.portal.fleet.helpers import report, sample

OLD = "0.1.0"  # the last release before this round (tests/upgrade/oldtree.py: 3857d6b)


@pytest.mark.parametrize(("version", "expected"), [
    (OLD, False), ("0.1.9", False), ("0.2.0", True), ("0.2.0rc1", True), ("v0.3", True),
    ("1.0.0", True), ("", True), ("not-a-version", True)])
def test_which_release_runs_validation(version: str, expected: bool) -> None:
    # unknown or unparsable: taken as current (the request waits for a report anyway)
    assert protocol.supports(version, "validation") is expected


def test_this_release_has_every_feature_the_portal_relies_on() -> None:
    """Fails when a feature is added to the table without bumping ``agents.__version__``."""
    have = parse_version(AGENT_VERSION)
    assert have is not None
    assert all(have >= first for first in FEATURES.values()), (AGENT_VERSION, FEATURES)
    assert not protocol.supports(OLD, "validation")


def _enrolled(agent_client: Any, version: str) -> Node:
    agent_client.enrol()
    node = Node.objects.get(hostname="gpu-node-01")
    for i in range(2):
        Gpu.objects.get_or_create(node=node, index=i, defaults={
            "uuid": f"GPU-gpu-node-01-{i}", "model": "H100"})
    agent_client.report(report(agent_client.node_id, 1, telemetry=[sample(ts=100.0)],
                               agent_version=version))
    node.refresh_from_db()
    assert node.agent_version == version
    return node


@pytest.mark.django_db
def test_an_old_agent_back_from_silence_stays_in_repair_saying_upgrade_it(
        agent_client: Any, settings: Any) -> None:
    settings.GPUPOOL_AGENT_UNREACHABLE_AFTER_S = 30
    node = _enrolled(agent_client, OLD)
    clock.advance(timedelta(seconds=31))
    assert health_sweep() == 1
    agent_client.report(report(agent_client.node_id, 2, telemetry=[sample(ts=200.0)],
                               agent_version=OLD))
    node.refresh_from_db()
    assert node.service == Service.OUT_OF_SERVICE  # not "validating" for ever
    assert OLD in node.service_cause and "upgrade it to 0.2.0" in node.service_cause
    row = NodeDesiredState.objects.filter(node=node).first()
    assert row is None or "validation" not in row.document
    assert not NodeValidation.objects.filter(node=node).exists()
    # the agent upgraded (its report says so), the operator validates as the cause says
    agent_client.report(report(agent_client.node_id, 3, telemetry=[sample(ts=210.0)],
                               agent_version=AGENT_VERSION))
    node.refresh_from_db()
    validation.validate(part=node, reason="agent upgraded")
    node.refresh_from_db()
    assert node.service == Service.VALIDATING
    assert NodeDesiredState.objects.get(node=node).document["validation"]["level"] == 2


@pytest.mark.django_db
def test_validating_an_old_agents_node_is_refused_with_409_naming_the_field(
        agent_client: Any) -> None:
    node = _enrolled(agent_client, OLD)
    faults.gpu_failed(gpu=Gpu.objects.get(node=node, index=1), cause="xid 48", rule="xid.48")
    staff, api = make_user("ops", staff=True), APIClient()
    api.force_authenticate(staff)
    gpu = Gpu.objects.get(node=node, index=1)
    resp = api.post(f"/api/v1/fleet/gpus/{gpu.uuid}/service",
                    {"action": "validate", "reason": "DIMM reseated"}, format="json")
    assert resp.status_code == 409, resp.content
    assert "agent_version" in resp.json()["fields"]
    gpu.refresh_from_db()
    assert gpu.service == Service.OUT_OF_SERVICE  # unchanged
    assert not NodeValidation.objects.filter(node=node).exists()
    with pytest.raises(validation.AgentTooOld):
        validation.validate(part=gpu)
