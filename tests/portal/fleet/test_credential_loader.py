"""The raw credential loader (``services/credentials.py``) on every backend."""

from __future__ import annotations

import pytest

from portal.fleet.models import AgentCredential
from portal.fleet.services.credentials import credential_with_node
from portal.fleet.services.enrolment import credential_authenticate
from tests.portal.fleet.conftest import AgentClient


@pytest.mark.django_db
def test_credential_loader_returns_aware_datetimes_on_every_backend(
        agent_client: AgentClient) -> None:
    """Regression (found by the credential fuzz test on SQLite, the demo's database): the
    raw loader decoded JSON but skipped the backend's converters, so on SQLite a rotated
    credential's ``valid_until`` came back naive and every later request was a 500."""
    assert agent_client.enrol("gpu-node-55").status_code == 201
    cred = AgentCredential.objects.get(agent__agent_id=agent_client.node_id)
    AgentCredential.objects.filter(pk=cred.pk).update(valid_until=cred.created)
    fast = credential_with_node(cred.credential_hash)
    assert fast is not None
    orm = AgentCredential.objects.select_related("agent__node").get(pk=cred.pk)
    for name in ("created", "valid_until"):
        assert getattr(fast, name) == getattr(orm, name)
        assert getattr(fast, name).tzinfo is not None
    assert fast.agent.enrolled_at == orm.agent.enrolled_at
    assert credential_authenticate(agent_client.credential) is None  # past its overlap
