"""The agent API stays additive-tolerant while the tenant API turned strict (issue 28):
protocol v1 says receivers ignore unknown fields (docs/agent-protocol.md §1), so an agent
newer than this portal (a report with MIG instances, say) is still heard."""

from __future__ import annotations

import pytest

from portal.fleet.models import AgentReport
from tests.portal.fleet.conftest import AgentClient
from tests.portal.fleet.helpers import gpu, report, sample


@pytest.mark.django_db
def test_a_report_with_fields_this_portal_does_not_know_is_accepted(
        agent_client: AgentClient) -> None:
    agent_client.enrol()
    mig = [{"gpu": 0, "gpu_instance_id": 1, "profile": "1g.10gb", "start": 0}]
    body = report(agent_client.node_id, 1, telemetry=[sample(gpus=[gpu(0, mig_mode=1)])],
                  mig_instances=mig)
    resp = agent_client.report(body)
    assert resp.status_code == 200, resp.content[:300]
    assert AgentReport.objects.filter(agent__agent_id=agent_client.node_id).exists()
