from __future__ import annotations

import pytest

from portal.fleet import selectors, services
from portal.fleet.models import NodeDesiredState
from tests.portal.fleet.helpers import guid, make_node

PART = {"name": "tenant_acme", "pkey": "0x0101", "membership": "full", "ipoib": True,
        "port_guids": [guid(1)]}
GRANT = {"lease_id": "ls_ab12", "account": "lease-ab12", "gpu_indices": [0, 1],
         "gpu_uuids": ["GPU-a", "GPU-b"], "ssh_authorized_keys": ["ssh-ed25519 AAAA a@b"],
         "expires_at": "2026-11-30T23:40:00+00:00"}


@pytest.mark.django_db
def test_generation_rises_only_on_change_and_document_is_complete() -> None:
    node = make_node()
    g1 = services.node_desired_set(node=node, partitions=[PART], access_grants=[GRANT])
    assert g1 == 1
    assert services.node_desired_set(node=node, partitions=[PART], access_grants=[GRANT]) == 1
    doc = NodeDesiredState.objects.get(node=node).document
    assert set(doc) == {"protocol", "node_id", "generation", "issued_at", "partitions",
                        "access_grants"}
    assert doc["node_id"] == services.agent_for_node(node=node).agent_id
    assert doc["node_id"].startswith("nd_")
    assert services.node_desired_set(node=node, partitions=[], access_grants=[]) == 2


@pytest.mark.django_db
def test_invalid_desired_state_is_refused() -> None:
    from portal.core.errors import ApplicationError

    node = make_node()
    with pytest.raises(ApplicationError):
        services.node_desired_set(node=node, partitions=[{**PART, "pkey": "0x7fff"}],
                                  access_grants=[])
    assert not NodeDesiredState.objects.filter(node=node, generation__gt=0).exists()


@pytest.mark.django_db
def test_simulate_apply_converges() -> None:
    node = make_node()
    gen = services.node_desired_set(node=node, partitions=[PART], access_grants=[GRANT])
    assert not selectors.node_converged(node=node, generation=gen)
    services.simulate_apply(node=node)
    assert selectors.node_converged(node=node, generation=gen)
    gen2 = services.node_desired_set(node=node, partitions=[], access_grants=[GRANT])
    assert not selectors.node_converged(node=node, generation=gen2)


@pytest.mark.django_db
def test_fabric_desired_generation() -> None:
    parts = [{"name": "tenant_acme", "pkey": "0x0101", "ipoib": True,
              "members": [{"guid": guid(1), "membership": "full"}]}]
    assert services.fabric_desired_set(partitions=parts) == 1
    assert services.fabric_desired_set(partitions=parts) == 1
    assert services.fabric_desired_set(partitions=[]) == 2
