"""``Authorization: Bearer gpn_…`` for the agent API (§2)."""

from __future__ import annotations

from django.http import HttpRequest

from portal.fleet.api.throttle import throttle
from portal.fleet.errors import AgentError
from portal.fleet.models import AgentCredential
from portal.fleet.services.enrolment import credential_authenticate


class AgentCredentialAuth:
    """Resolves the request's agent credential; 429 when the credential is over its rate
    (before any database work), 401 for a missing/unknown/revoked/expired one, 403 when
    the ``{node_id}`` in the URL is not the credential's agent."""

    keyword = "Bearer "

    def authenticate(self, request: HttpRequest, node_id: str) -> AgentCredential:
        header = request.headers.get("Authorization", "")
        cred = None
        if header.startswith(self.keyword):
            raw = header[len(self.keyword):].strip()
            throttle(scope="agent", secret=raw)
            cred = credential_authenticate(raw)
        if cred is None:
            raise AgentError("unauthenticated", "missing, invalid, expired or revoked credential")
        if cred.agent.agent_id != node_id:
            raise AgentError("forbidden", "this credential belongs to another node")
        return cred


agent_auth = AgentCredentialAuth()
