from __future__ import annotations

import pytest

from portal.fleet import selectors, services
from portal.fleet.models import Agent
from tests.portal.fleet.helpers import guid

PARTS = [{"name": "tenant_acme", "pkey": "0x0101", "ipoib": True,
          "members": [{"guid": guid(1), "membership": "full"}]}]


def fabric_report(node_id: str, seq: int, generation: int, drift: list) -> dict:
    return {"protocol": 1, "node_id": node_id, "seq": seq,
            "created_at": "2026-11-29T23:40:00+00:00", "agent_version": "0.1.0",
            "dropped_reports": 0, "telemetry": [],
            "observed": {"generation_applied": generation, "generation_seen": generation,
                         "apply_errors": [], "manager": "opensm", "drift": drift}}


@pytest.mark.django_db
def test_fabric_agent_gets_partition_map_and_reports_drift(agent_client) -> None:
    assert agent_client.enrol("sm-01", role="fabric").status_code == 201
    agent = Agent.objects.get(agent_id=agent_client.node_id)
    assert agent.role == "fabric" and agent.node is None
    assert agent_client.desired(after=0).status_code == 204
    gen = services.fabric_desired_set(partitions=PARTS)
    doc = agent_client.desired(after=0)
    assert doc.status_code == 200
    assert doc.json()["node_id"] == agent_client.node_id
    assert doc.json()["generation"] == gen and doc.json()["partitions"] == PARTS
    drift = [{"pkey": "0x0101", "guid": guid(1), "expected": "full", "actual": "absent"}]
    ack = agent_client.report(fabric_report(agent_client.node_id, 1, gen, drift))
    assert ack.status_code == 200 and ack.json()["desired_generation"] == gen
    view = selectors.partition_drift()
    assert view["drift"] == drift and view["generation_applied"] == gen
    assert view["manager"] == "opensm" and view["desired_generation"] == gen
    agent_client.report(fabric_report(agent_client.node_id, 2, gen, []))
    assert selectors.partition_drift()["drift"] == []


@pytest.mark.django_db
def test_fabric_credential_cannot_act_for_a_node(agent_client, other_agent) -> None:
    agent_client.enrol("gpu-node-01")
    other_agent.enrol("sm-01", role="fabric")
    resp = other_agent.desired(node_id=agent_client.node_id)
    assert resp.status_code == 403
