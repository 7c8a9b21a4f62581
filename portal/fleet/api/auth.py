"""``Authorization: Bearer gpn_…`` for the agent API (§2)."""

from __future__ import annotations

from datetime import datetime

from django.http import HttpRequest

from portal.core import clock
from portal.fleet.api.throttle import throttle
from portal.fleet.errors import AgentError
from portal.fleet.models import AgentCredential
from portal.fleet.services import telemetry_pg
from portal.fleet.services.enrolment import (
    credential_authenticate,
    credential_authenticate_for_report,
    digest,
)

PREFIX = "gpn_"


def unauthenticated() -> AgentError:
    return AgentError("unauthenticated", "missing, invalid, expired or revoked credential")


def forbidden() -> AgentError:
    return AgentError("forbidden", "this credential belongs to another node")


def check_live(*, found: bool, valid_until: datetime | None) -> None:
    """401 unless a credential was found and is not past its overlap end (rotation)."""
    if not found or (valid_until is not None and valid_until <= clock.now()):
        raise unauthenticated()


class AgentCredentialAuth:
    """Resolves the request's agent credential; 429 when the credential is over its rate
    (before any database work), 401 for a missing/unknown/revoked/expired one, 403 when
    the ``{node_id}`` in the URL is not the credential's agent."""

    keyword = "Bearer "

    def raw_bearer(self, request: HttpRequest) -> str:
        """The bearer value, NOT yet throttled; 401 when there is none."""
        header = request.headers.get("Authorization", "")
        if not header.startswith(self.keyword):
            raise unauthenticated()
        return header[len(self.keyword):].strip()

    def bearer(self, request: HttpRequest) -> str:
        """The bearer value, throttled (no database work); 401 when there is none."""
        raw = self.raw_bearer(request)
        throttle(scope="agent", secret=raw)
        return raw

    def unthrottled_hash(self, request: HttpRequest) -> tuple[str, str]:
        """(bearer value, its stored form: sha256 hex), no cache round trip: for an async
        view, which takes the token in a database thread (``throttle_agent``), never in
        its event loop. 401 when it cannot be one of ours."""
        raw = self.raw_bearer(request)
        if not raw.startswith(PREFIX):
            raise unauthenticated()
        return raw, digest(raw)

    @staticmethod
    def throttle_agent(raw: str) -> None:
        """The rate limit ``bearer`` applies, for a value taken by ``unthrottled_hash``."""
        throttle(scope="agent", secret=raw)

    def authenticate(self, request: HttpRequest, node_id: str) -> AgentCredential:
        return self._owner(credential_authenticate(self.bearer(request)), node_id)

    def authenticate_for_report(
            self, request: HttpRequest,
            node_id: str) -> tuple[AgentCredential, telemetry_pg.Previous | None]:
        """``authenticate``, with the node's latest telemetry rows read in the same
        statement where the database can (``None``: the ingest reads them)."""
        found = credential_authenticate_for_report(self.bearer(request))
        cred = self._owner(found[0] if found else None, node_id)
        assert found is not None
        return cred, found[1]

    @staticmethod
    def _owner(cred: AgentCredential | None, node_id: str) -> AgentCredential:
        if cred is None:
            raise unauthenticated()
        if cred.agent.agent_id != node_id:
            raise forbidden()
        return cred


agent_auth = AgentCredentialAuth()
