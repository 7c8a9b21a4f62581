"""Issue 10, finding 5: a bootstrap token enrols only the hosts (and role) it was issued
for, and taking over an enrolled node's identity waits for an operator."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from portal.core.models import AuditLog
from portal.fleet import services
from portal.fleet.models import Agent, EnrolmentRequest
from portal.fleet.services.enrolment import bootstrap_token_create
from portal.inventory.models import Node
from tests.portal.factories import make_user
from tests.portal.fleet.conftest import AgentClient
from tests.portal.fleet.helpers import make_node, report

GRANT = {"lease_id": "ls_ab12", "account": "lease-ab12", "gpu_indices": [0],
         "ssh_authorized_keys": ["ssh-ed25519 AAAAC3Nza alice@example.org"]}


def _code(resp: Any) -> str:
    return str(resp.json()["error"]["code"])


@pytest.fixture
def staff_client(db: Any) -> Client:
    client = Client()
    client.force_login(make_user("ops", staff=True))
    return client


@pytest.mark.django_db
def test_bootstrap_token_cannot_claim_other_hostname(agent_client: AgentClient,
                                                     other_agent: AgentClient) -> None:
    victim = make_node("gpu-node-02")  # in the inventory, not enrolled yet
    services.node_desired_set(node=victim, partitions=[], access_grants=[GRANT])
    _, token = bootstrap_token_create(actor=None, hostname="gpu-node-01")
    resp = other_agent.enrol("gpu-node-02", token=token)
    assert resp.status_code == 403 and _code(resp) == "enrolment_refused"
    assert resp.json()["error"]["details"] == [
        {"field": "hostname", "problem": "not allowed by this bootstrap token"}]
    assert not Agent.objects.filter(node=victim, enrolled_at__isnull=False).exists()
    assert agent_client.enrol("gpu-node-01", token=token).status_code == 201  # unspent
    _, fleet = bootstrap_token_create(actor=None, hostname="GPU-NODE-1?")
    assert other_agent.enrol("gpu-node-02", token=fleet).status_code == 403
    assert other_agent.enrol("gpu-node-13", token=fleet).status_code == 201  # pattern, any case


@pytest.mark.django_db
def test_bootstrap_token_cannot_enrol_another_role(other_agent: AgentClient) -> None:
    _, token = bootstrap_token_create(actor=None, hostname="sm-01", role="fabric")
    resp = other_agent.enrol("sm-01", role="node", token=token)
    assert resp.status_code == 403 and _code(resp) == "enrolment_refused"
    assert resp.json()["error"]["details"][0]["field"] == "role"
    assert other_agent.enrol("sm-01", role="fabric", token=token).status_code == 201


@pytest.mark.django_db
def test_unbound_legacy_token_is_refused(other_agent: AgentClient) -> None:
    token, raw = bootstrap_token_create(actor=None, hostname="gpu-node-01")
    token.hostname_pattern = ""  # as migrated from before bindings
    token.save(update_fields=["hostname_pattern"])
    resp = other_agent.enrol("gpu-node-01", token=raw)
    assert resp.status_code == 403 and _code(resp) == "enrolment_refused"


@pytest.mark.django_db
def test_takeover_waits_for_operator_approval(agent_client: AgentClient,
                                              other_agent: AgentClient,
                                              staff_client: Client) -> None:
    assert agent_client.enrol("gpu-node-01").status_code == 201
    original, original_cred = agent_client.node_id, agent_client.credential
    assert agent_client.report(report(original, 1)).status_code == 200
    node = Node.objects.get(hostname="gpu-node-01")
    services.node_desired_set(node=node, partitions=[], access_grants=[GRANT])

    _, token = bootstrap_token_create(actor=None, hostname="gpu-node-0*")
    for _ in range(2):  # the intruder (or a reinstalled host) retries: still held
        resp = other_agent.enrol("gpu-node-01", token=token)
        assert resp.status_code == 409 and _code(resp) == "pending_approval"
        assert resp["Retry-After"] == "60" and "credential" not in resp.json()
    held = EnrolmentRequest.objects.get()
    assert (held.state, held.attempts, held.agent.agent_id) == ("pending", 2, original)
    assert agent_client.desired(after=0).json()["access_grants"][0]["lease_id"] == "ls_ab12"
    assert agent_client.report(report(original, 2)).status_code == 200  # the old one works
    assert other_agent.enrol("gpu-node-02", token=token).status_code == 401  # token reserved

    page = staff_client.get(reverse("console:enrolments"))
    assert page.status_code == 200 and b"gpu-node-01" in page.content
    staff_client.post(reverse("console:enrolments"), {"request": held.pk, "action": "approve",
                                                      "reason": "reinstalled"})
    assert EnrolmentRequest.objects.get().state == "approved"
    assert agent_client.report(report(original, 3)).status_code == 200  # until the retry

    resp = other_agent.enrol("gpu-node-01", token=token)
    assert resp.status_code == 201 and other_agent.node_id != original
    assert EnrolmentRequest.objects.get().state == "completed"
    assert agent_client.report(report(original, 4), credential=original_cred).status_code == 401
    assert other_agent.desired(after=0).json()["node_id"] == other_agent.node_id
    actions = set(AuditLog.objects.values_list("action", flat=True))
    assert {"fleet.enrolment_held", "fleet.enrolment_approve", "fleet.agent_reenrol"} <= actions


@pytest.mark.django_db
def test_denied_takeover_keeps_the_enrolled_agent(agent_client: AgentClient,
                                                  other_agent: AgentClient,
                                                  staff_client: Client) -> None:
    assert agent_client.enrol("gpu-node-01").status_code == 201
    _, token = bootstrap_token_create(actor=None, hostname="gpu-node-01")
    assert other_agent.enrol("gpu-node-01", token=token).status_code == 409
    held = EnrolmentRequest.objects.get()
    staff_client.post(reverse("console:enrolments"), {"request": held.pk, "action": "deny"})
    resp = other_agent.enrol("gpu-node-01", token=token)
    assert resp.status_code == 403 and _code(resp) == "enrolment_denied"
    assert agent_client.report(report(agent_client.node_id, 1)).status_code == 200
    assert AuditLog.objects.filter(action="fleet.enrolment_deny").exists()
    staff_client.post(reverse("console:enrolments"), {"request": held.pk, "action": "approve"})
    assert EnrolmentRequest.objects.get().state == "denied"  # decided once


@pytest.mark.django_db
def test_enrolment_page_is_staff_only(agent_client: AgentClient, other_agent: AgentClient) -> None:
    assert agent_client.enrol("gpu-node-01").status_code == 201
    _, token = bootstrap_token_create(actor=None, hostname="gpu-node-01")
    assert other_agent.enrol("gpu-node-01", token=token).status_code == 409
    held = EnrolmentRequest.objects.get()
    client = Client()
    client.force_login(make_user("mallory"))
    assert client.get(reverse("console:enrolments")).status_code == 403
    assert client.post(reverse("console:enrolments"),
                       {"request": held.pk, "action": "approve"}).status_code == 403
    assert EnrolmentRequest.objects.get().state == "pending"
    anonymous = Client().get(reverse("console:enrolments"))
    assert anonymous.status_code == 302


@pytest.mark.django_db
def test_node_credential_reads_only_its_own_desired_state(agent_client: AgentClient,
                                                          other_agent: AgentClient) -> None:
    assert agent_client.enrol("gpu-node-01").status_code == 201
    assert other_agent.enrol("gpu-node-02").status_code == 201
    node = Node.objects.get(hostname="gpu-node-01")
    services.node_desired_set(node=node, partitions=[], access_grants=[GRANT])
    stolen = other_agent.desired(after=0, node_id=agent_client.node_id)
    assert stolen.status_code == 403 and _code(stolen) == "forbidden"
    forged = other_agent.report(report(agent_client.node_id, 1), node_id=agent_client.node_id)
    assert forged.status_code == 403
    own_url_other_body = other_agent.report(report(agent_client.node_id, 1))
    assert own_url_other_body.status_code == 403
    assert other_agent.desired(after=0).status_code == 204


@pytest.mark.django_db
def test_reenrol_token_replaces_identity_without_approval(agent_client: AgentClient,
                                                          other_agent: AgentClient) -> None:
    assert agent_client.enrol("gpu-node-01").status_code == 201
    _, token = bootstrap_token_create(actor=None, hostname="gpu-node-01", allow_reenrol=True)
    assert other_agent.enrol("gpu-node-01", token=token).status_code == 201
    assert not EnrolmentRequest.objects.exists()
    assert agent_client.report(report(agent_client.node_id, 1)).status_code == 401


@pytest.mark.django_db
def test_token_hostname_pattern_must_name_hosts() -> None:
    from portal.fleet.errors import AgentError

    for bad in ("", "*", "?*", "a b", "x" * 300):
        with pytest.raises(AgentError):
            bootstrap_token_create(actor=None, hostname=bad)


@pytest.mark.django_db
def test_fabric_takeover_waits_for_operator_approval(agent_client: AgentClient,
                                                     other_agent: AgentClient) -> None:
    assert agent_client.enrol("sm-01", role="fabric").status_code == 201
    _, token = bootstrap_token_create(actor=None, hostname="sm-01", role="fabric")
    resp = other_agent.enrol("sm-01", role="fabric", token=token)
    assert resp.status_code == 409 and _code(resp) == "pending_approval"
    assert EnrolmentRequest.objects.get().agent.agent_id == agent_client.node_id
    assert agent_client.desired(after=-1).status_code in (200, 204)  # still the fabric agent
