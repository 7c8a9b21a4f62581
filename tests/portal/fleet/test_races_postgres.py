"""Races that only a real PostgreSQL can show (row locks, unique constraints)."""

from __future__ import annotations

import pytest

from portal.fleet import services
from portal.fleet.models import AgentReport, TenantPartition
from portal.fleet.services.ingest import report_ingest
from tests.portal.driving import in_threads
from tests.portal.factories import make_tenant
from tests.portal.fleet.helpers import make_node, report

pytestmark = [pytest.mark.services("postgres"), pytest.mark.django_db(transaction=True)]


def test_parallel_allocations_get_distinct_keys() -> None:
    tenants = [make_tenant(f"t{i}") for i in range(8)]
    parts = in_threads(8, lambda i: services.partition_for_tenant(tenant=tenants[i]))
    assert len({p.pkey for p in parts}) == 8
    same = in_threads(6, lambda i: services.partition_for_tenant(tenant=tenants[0]).pkey)
    assert set(same) == {parts[0].pkey}
    assert TenantPartition.objects.count() == 8


def test_parallel_resends_are_stored_once() -> None:
    node = make_node()
    agent = services.agent_for_node(node=node)
    body = report(agent.agent_id, 42)
    acks = in_threads(6, lambda i: report_ingest(agent=agent, body=body)["status"])
    assert sorted(acks) == ["accepted"] + ["duplicate"] * 5
    assert AgentReport.objects.filter(agent=agent, seq=42).count() == 1


def test_parallel_desired_sets_bump_once_per_change() -> None:
    node = make_node()
    gens = in_threads(6, lambda i: services.node_desired_set(
        node=node, partitions=[], access_grants=[]))
    assert set(gens) == {1}
