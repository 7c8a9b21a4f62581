"""``Authorization: Bearer gpn_…`` for the agent API (§2)."""

from __future__ import annotations

from django.http import HttpRequest

from portal.fleet.errors import AgentError
from portal.fleet.models import AgentCredential
from portal.fleet.services.enrolment import credential_authenticate


class AgentCredentialAuth:
    """Resolves the request's agent credential; 401 for a missing/unknown/revoked/expired
    one, 403 when the ``{node_id}`` in the URL is not the credential's agent."""

    keyword = "Bearer "

    def authenticate(self, request: HttpRequest, node_id: str) -> AgentCredential:
        header = request.headers.get("Authorization", "")
        cred = None
        if header.startswith(self.keyword):
            cred = credential_authenticate(header[len(self.keyword):].strip())
        if cred is None:
            raise AgentError("unauthenticated", "missing, invalid, expired or revoked credential")
        if cred.agent.agent_id != node_id:
            raise AgentError("forbidden", "this credential belongs to another node")
        return cred


agent_auth = AgentCredentialAuth()
