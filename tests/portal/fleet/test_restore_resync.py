"""Issue 31 (restore): a database restored from a backup knows older desired generations
than its agents have applied. The first report that says so makes the portal write the
restored desired state again above the agent's generation, so the agent applies it at once
(revoking grants the restored database does not have) instead of waiting, unseen, until the
old counter caught up."""

from __future__ import annotations

from typing import Any

import pytest

from portal.core.models import AuditLog
from portal.fleet import services
from portal.fleet.models import FabricDesiredState, NodeDesiredState
from portal.inventory.models import Node
from tests.portal.fleet.helpers import report, sample

GRANT = {"lease_id": "ls_0123456789abcdef", "account": "lease-0123456789ab",
         "gpu_indices": [0], "gpu_uuids": ["GPU-x-0"], "ssh_authorized_keys": [],
         "expires_at": "2030-01-01T00:00:00+00:00", "not_after": "2030-01-01T00:00:00+00:00"}


@pytest.mark.django_db
def test_an_agent_ahead_of_a_restored_database_gets_the_restored_state_at_once(
        agent_client: Any) -> None:
    agent_client.enrol()
    node = Node.objects.get(hostname="gpu-node-01")
    services.node_desired_set(node=node, partitions=[], access_grants=[GRANT])
    restored = NodeDesiredState.objects.get(node=node)
    assert restored.generation == 1
    # the agent applied generations 2..40 before the disaster (a lease granted after the
    # backup among them); the restored database only knows generation 1 without it
    services.node_desired_set(node=node, partitions=[], access_grants=[])
    NodeDesiredState.objects.filter(node=node).update(generation=1, document={
        **restored.document})
    assert agent_client.desired(after=40, wait=0).status_code == 204  # the agent is stuck
    resp = agent_client.report(report(agent_client.node_id, 1, telemetry=[sample()],
                                      generation_applied=40))
    assert resp.status_code in (200, 202)
    row = NodeDesiredState.objects.get(node=node)
    assert row.generation == 41 and row.document["access_grants"] == [GRANT]
    got = agent_client.desired(after=40, wait=0)
    assert got.status_code == 200 and got.json()["generation"] == 41
    assert AuditLog.objects.filter(action="fleet.desired_resync").count() == 1
    agent_client.report(report(agent_client.node_id, 2, telemetry=[sample()],
                               generation_applied=41))
    assert NodeDesiredState.objects.get(node=node).generation == 41  # once, not again


@pytest.mark.django_db
def test_the_fabric_manager_ahead_of_a_restored_map_gets_it_again(agent_client: Any) -> None:
    agent_client.enrol(hostname="sm-host", role="fabric")
    services.fabric_desired_set(partitions=[])
    body = {"protocol": 1, "node_id": agent_client.node_id, "seq": 1,
            "created_at": "2026-12-06T10:00:00+00:00", "agent_version": "0.1.0",
            "dropped_reports": 0, "telemetry": [],
            "observed": {"generation_applied": 9, "manager": "fake", "drift": []}}
    resp = agent_client.report(body)
    assert resp.status_code in (200, 202), resp.content
    assert FabricDesiredState.objects.get(name="default").generation == 10


@pytest.mark.django_db
def test_a_node_whose_first_desired_state_came_after_the_backup_gets_an_empty_one(
        agent_client: Any) -> None:
    """The restored database has no desired row for the node at all (its first lease was
    granted after the backup): the agent's grants are revoked by an empty document above
    its generation, not left in place (found by the restore drill)."""
    agent_client.enrol()
    node = Node.objects.get(hostname="gpu-node-01")
    assert not NodeDesiredState.objects.filter(node=node).exists()
    resp = agent_client.report(report(agent_client.node_id, 1, telemetry=[sample()],
                                      generation_applied=7))
    assert resp.status_code in (200, 202)
    row = NodeDesiredState.objects.get(node=node)
    assert row.generation == 8
    assert row.document["access_grants"] == [] and row.document["partitions"] == []
    got = agent_client.desired(after=7, wait=0)
    assert got.status_code == 200 and got.json()["generation"] == 8
    assert got.json()["access_grants"] == []
    assert AuditLog.objects.filter(action="fleet.desired_resync").count() == 1


@pytest.mark.django_db
def test_a_fresh_node_at_generation_zero_is_left_alone(agent_client: Any) -> None:
    agent_client.enrol()
    node = Node.objects.get(hostname="gpu-node-01")
    agent_client.report(report(agent_client.node_id, 1, telemetry=[sample()],
                               generation_applied=0))
    assert not NodeDesiredState.objects.filter(node=node, generation__gt=0).exists()
    assert not AuditLog.objects.filter(action="fleet.desired_resync").exists()


@pytest.mark.django_db
def test_a_fabric_manager_without_a_restored_map_gets_an_empty_one(agent_client: Any) -> None:
    agent_client.enrol(hostname="sm-host", role="fabric")
    assert not FabricDesiredState.objects.exists()
    body = {"protocol": 1, "node_id": agent_client.node_id, "seq": 1,
            "created_at": "2026-12-06T10:00:00+00:00", "agent_version": "0.1.0",
            "dropped_reports": 0, "telemetry": [],
            "observed": {"generation_applied": 4, "manager": "fake", "drift": []}}
    resp = agent_client.report(body)
    assert resp.status_code in (200, 202), resp.content
    row = FabricDesiredState.objects.get(name="default")
    assert row.generation == 5 and row.document["partitions"] == []
