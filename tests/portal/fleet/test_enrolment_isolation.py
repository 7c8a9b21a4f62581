"""Issue 10.5 and 10.6: host names are case-insensitive (and racing first enrolments of
one new host do not 500); an enrolling host cannot claim another node's HCA port GUID."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from portal.fleet.models import Agent, BootstrapToken
from portal.fleet.services.enrolment import bootstrap_token_create
from portal.inventory.models import Fabric, HcaPort, Node, StorageEndpoint
from tests.portal.driving import in_threads
from tests.portal.fleet.conftest import BASE, AgentClient
from tests.portal.fleet.helpers import make_node


def _inventory(port_guid: str) -> dict[str, Any]:
    return {"ib_ports": [{"device": "mlx5_0", "port": 1, "port_guid": port_guid,
                          "node_guid": "0002:c903:000e:0b72", "rate_gbps": 400.0}]}


@pytest.mark.django_db
def test_enrolment_hostname_is_case_insensitive(agent_client: AgentClient) -> None:
    node = make_node("gpu-node-01", gpus=1)
    token = bootstrap_token_create(actor=None, hostname="GPU-NODE-*")[1]
    resp = agent_client.enrol("GPU-NODE-01", token=token)
    assert resp.status_code == 201, resp.content
    assert Node.objects.count() == 1
    assert Agent.objects.get(node=node).enrolled_at is not None


@pytest.mark.django_db
def test_enrolment_finds_an_inventory_node_named_in_capitals(agent_client: AgentClient) -> None:
    node = make_node("GPU-NODE-02", gpus=1)  # imported with capitals
    resp = agent_client.enrol("gpu-node-02")
    assert resp.status_code == 201, resp.content
    assert list(Node.objects.values_list("pk", flat=True)) == [node.pk]


@pytest.mark.django_db
def test_second_enrolment_in_other_case_is_a_takeover(agent_client: AgentClient,
                                                      other_agent: AgentClient) -> None:
    assert agent_client.enrol("gpu-node-03").status_code == 201
    resp = other_agent.enrol("GPU-Node-03")
    assert resp.status_code == 409, resp.content  # held for an operator, not a new node
    assert resp.json()["error"]["code"] == "pending_approval"
    assert Node.objects.count() == 1


@pytest.mark.services("postgres")
@pytest.mark.django_db(transaction=True)
def test_racing_first_enrolments_of_a_new_hostname_do_not_500() -> None:
    tokens = [bootstrap_token_create(actor=None, hostname="gpu-node-*")[1] for _ in range(4)]
    names = ["gpu-node-09", "GPU-NODE-09", "gpu-node-09", "Gpu-Node-09"]

    def enrol(i: int) -> int:
        body = {"protocol": 1, "bootstrap_token": tokens[i], "role": "node",
                "hostname": names[i], "agent_version": "0.1.0", "inventory": {}}
        return int(Client().post(f"{BASE}/enrol", json.dumps(body),
                                 content_type="application/json").status_code)

    codes = in_threads(4, enrol)
    assert sorted(codes) == [201, 409, 409, 409], codes  # one enrols, the rest are held
    assert list(Node.objects.values_list("hostname", flat=True)) == ["gpu-node-09"]
    assert Agent.objects.count() == 1
    assert BootstrapToken.objects.filter(used_at__isnull=False).count() == 1


@pytest.mark.django_db
def test_enrolment_cannot_claim_another_nodes_port_guid(agent_client: AgentClient) -> None:
    victim = make_node("gpu-node-01", gpus=1)
    guid = "0x0002c903000e0b72"
    HcaPort.objects.create(node=victim, port_guid=guid, device="mlx5_0")
    resp = agent_client.enrol("gpu-node-66", inventory=_inventory(guid))
    assert resp.status_code == 400, resp.content
    assert resp.json()["error"]["details"] == [
        {"field": "inventory.ib_ports[0].port_guid", "problem": "belongs to another node"}]
    assert HcaPort.objects.get(port_guid=guid).node == victim
    assert not Node.objects.filter(hostname="gpu-node-66").exists()  # nothing changed
    assert not BootstrapToken.objects.filter(used_at__isnull=False).exists()


@pytest.mark.django_db
def test_enrolment_cannot_claim_a_storage_port_guid(agent_client: AgentClient) -> None:
    guid = "0x0002c903000e0b73"
    StorageEndpoint.objects.create(fabric=Fabric.objects.create(name="f"), port_guid=guid)
    resp = agent_client.enrol("gpu-node-67", inventory=_inventory(guid))
    assert resp.status_code == 400, resp.content
    assert not HcaPort.objects.filter(port_guid=guid, node__isnull=False).exists()


@pytest.mark.django_db
def test_enrolment_takes_an_imported_unassigned_port(agent_client: AgentClient) -> None:
    guid = "0x0002c903000e0b74"
    HcaPort.objects.create(node=None, port_guid=guid, device="mlx5_0")  # from ibnetdiscover
    assert agent_client.enrol("gpu-node-68", inventory=_inventory(guid)).status_code == 201
    assert HcaPort.objects.get(port_guid=guid).node.hostname == "gpu-node-68"
