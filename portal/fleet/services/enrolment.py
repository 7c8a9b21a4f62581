"""Enrolment with one-time bootstrap tokens, and per-agent credentials (hashed, revocable,
rotatable with overlap)."""

from __future__ import annotations

import fnmatch
import hashlib
import re
import secrets
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from portal.core import clock
from portal.core.errors import PermissionDenied
from portal.core.services import audit_record
from portal.fleet.errors import AgentError
from portal.fleet.models import (
    Agent,
    AgentCredential,
    AgentReport,
    BootstrapToken,
    EnrolmentRequest,
    NodeDesiredState,
    NodeHealth,
)
from portal.fleet.models.agents import Role
from portal.fleet.services import approval, telemetry_pg
from portal.fleet.services.approval import Enrolment
from portal.fleet.services.credentials import credential_with_node, credential_with_telemetry
from portal.fleet.services.desired import agent_for_node, new_agent_id
from portal.fleet.services.inventory_sync import node_for_enrolment
from portal.tenants.access import AnyUser, is_staff

DEFAULT_OVERLAP_S = 3600
DEFAULT_ENROL_RETRY_S = 600
ENROL_LOCK = 0x656E726F  # "enro": advisory lock class for one host name's enrolment
_PATTERN_RE = re.compile(r"^[A-Za-z0-9.*?\[\]!-]{1,253}$")


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@transaction.atomic
def bootstrap_token_create(*, actor: AnyUser | None, hostname: str, role: str = Role.NODE,
                           ttl_hours: float = 24, note: str = "",
                           allow_reenrol: bool = False) -> tuple[BootstrapToken, str]:
    """A new one-time token for hosts named ``hostname`` (an ``fnmatch`` pattern such as
    ``gpu-node-*``) in ``role``; the clear text is returned once and never stored. Staff
    only (``actor=None``: the operator's management command). ``allow_reenrol``: it may
    replace an enrolled agent's identity without approval (a planned reinstall)."""
    if actor is not None and not is_staff(actor):
        raise PermissionDenied("Only staff may issue bootstrap tokens.")
    if role not in Role.values:
        raise AgentError("invalid_request", f"role must be one of {', '.join(Role.values)}")
    if not _PATTERN_RE.match(hostname or "") or hostname.strip("*?") == "":
        raise AgentError("invalid_request", "hostname must be a host name or an fnmatch "
                         "pattern naming some (not only wildcards)",
                         [{"field": "hostname", "problem": "invalid host name pattern"}])
    raw = "gpb_" + secrets.token_urlsafe(24)
    token = BootstrapToken.objects.create(
        token_hash=digest(raw), role=role, note=note, hostname_pattern=hostname.lower(),
        allow_reenrol=allow_reenrol,
        created_by=actor if getattr(actor, "is_authenticated", False) else None,
        expires_at=clock.now() + timedelta(hours=ttl_hours))
    audit_record(actor=actor, action="fleet.bootstrap_token_create", obj=token,
                 changes={"role": role, "ttl_hours": ttl_hours, "hostname": hostname.lower(),
                          "allow_reenrol": allow_reenrol})
    return token, raw


def _new_credential(agent: Agent) -> str:
    raw = "gpn_" + secrets.token_urlsafe(32)
    AgentCredential.objects.create(agent=agent, credential_hash=digest(raw))
    return raw


def _refused() -> AgentError:
    return AgentError("invalid_bootstrap_token", "unknown, used or expired bootstrap token")


@transaction.atomic
def agent_enrol(*, body: dict[str, Any], remote_addr: str = "") -> Enrolment:
    """Consume the bootstrap token and enrol the host (creating or attaching its agent and,
    for the node role, its inventory Node by hostname) with a fresh credential. A host
    outside the token's binding is refused (403 ``enrolment_refused``); one that would
    take over an enrolled agent's identity is held for an operator (``pending``).
    ``body`` has been validated against ``protocol.ENROL``."""
    now = clock.now()
    body = {**body, "hostname": normal_hostname(body["hostname"])}
    token = (BootstrapToken.objects.select_for_update(of=("self",)).select_related("used_by")
             .filter(token_hash=digest(body["bootstrap_token"])).first())
    if token is None:
        raise _refused()
    _lock_hostname(body["hostname"])
    held = EnrolmentRequest.objects.select_for_update().filter(token=token).first()
    if held is not None and held.state != EnrolmentRequest.State.COMPLETED:
        if (answer := approval.held_enrolment(request=held, body=body, now=now)) is not None:
            return answer
        done = _complete(token, _attach(body), body, now)  # approved: take over now
        approval.enrolment_completed(request=held)
        return done
    if token.used_at is not None:
        if _is_retry(token, body, now):
            return _enrol_retry(token.used_by)
        raise _refused()
    if token.expires_at <= now:
        raise _refused()
    _check_binding(token, body)
    existing = _existing_agent(body)
    if existing is not None and _has_identity(existing) and not token.allow_reenrol:
        return approval.enrolment_hold(token=token, agent=existing, body=body, now=now,
                                       remote_addr=remote_addr)
    return _complete(token, _attach(body), body, now)


def normal_hostname(hostname: str) -> str:
    """Host names are case-insensitive (RFC 4343): ``GPU-NODE-01`` is ``gpu-node-01``."""
    return hostname.strip().lower()


def _lock_hostname(hostname: str) -> None:
    """Serialise enrolments of one host name (two first-time enrolments racing each other
    with different tokens): the second sees the first one's agent once it commits, and is
    held as a takeover instead of failing on the unique host name."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
                        [ENROL_LOCK, hostname])


def _check_binding(token: BootstrapToken, body: dict[str, Any]) -> None:
    if token.role != body["role"]:
        raise AgentError("enrolment_refused", f"this bootstrap token enrols {token.role} agents",
                         [{"field": "role", "problem": "not allowed by this bootstrap token"}])
    if not token.hostname_pattern or not fnmatch.fnmatchcase(body["hostname"],
                                                             token.hostname_pattern):
        raise AgentError("enrolment_refused", "this bootstrap token is not valid for "
                         "this host name", [{"field": "hostname",
                                              "problem": "not allowed by this bootstrap token"}])


def _existing_agent(body: dict[str, Any]) -> Agent | None:
    """The agent whose identity this enrolment would attach to (none yet: a new host)."""
    if body["role"] == Role.NODE:
        return Agent.objects.select_for_update().filter(
            node__hostname__iexact=body["hostname"]).first()
    return Agent.objects.select_for_update().filter(role=Role.FABRIC,
                                                    hostname__iexact=body["hostname"]).first()


def _has_identity(agent: Agent) -> bool:
    """An agent that enrolled (or holds a credential): taking it over needs approval."""
    return agent.enrolled_at is not None or agent.credentials.exists()


def _attach(body: dict[str, Any]) -> Agent:
    if body["role"] == Role.NODE:
        node = node_for_enrolment(hostname=body["hostname"],
                                  inventory=body.get("inventory") or {})
        NodeHealth.objects.get_or_create(node=node)
        return agent_for_node(node=node)
    return Agent.objects.filter(role=Role.FABRIC, hostname__iexact=body["hostname"]).first() \
        or Agent.objects.create(agent_id=new_agent_id(), role=Role.FABRIC,
                                hostname=body["hostname"])


def _complete(token: BootstrapToken, agent: Agent, body: dict[str, Any],
              now: datetime) -> Enrolment:
    """Enrol ``agent`` with ``token`` (a re-enrolled one gets a new identity)."""
    if agent.enrolled_at is not None:
        _new_identity(agent)
    agent.enrolled_at, agent.agent_version = now, body["agent_version"][:32]
    agent.machine_id = str(body.get("machine_id") or "")[:64]
    agent.save(update_fields=["enrolled_at", "agent_version", "machine_id"])
    token.used_at, token.used_by = now, agent
    token.save(update_fields=["used_at", "used_by"])
    raw = _new_credential(agent)
    audit_record(actor=None, actor_repr=f"agent:{agent.agent_id}", action="fleet.agent_enrol",
                 obj=agent, changes={"role": agent.role, "hostname": agent.hostname,
                                     "bootstrap_token": token.pk})
    return Enrolment("enrolled", agent, raw)


def _is_retry(token: BootstrapToken, body: dict[str, Any], now: datetime) -> bool:
    """The same host asks again with its used token because our first answer never reached
    it (client timeout): same hostname, role and machine id, within
    ``GPUPOOL_AGENT_ENROL_RETRY_S`` (600), and the agent has never reported with the
    credential it was given (so a replay after the agent is up is refused)."""
    agent = token.used_by
    grace = timedelta(seconds=getattr(settings, "GPUPOOL_AGENT_ENROL_RETRY_S",
                                      DEFAULT_ENROL_RETRY_S))
    return (agent is not None and token.used_at is not None and now - token.used_at <= grace
            and agent.last_seen is None and agent.hostname.lower() == body["hostname"]
            and agent.role == body["role"]
            and agent.machine_id == str(body.get("machine_id") or "")[:64])


def _enrol_retry(agent: Agent | None) -> Enrolment:
    assert agent is not None
    AgentCredential.objects.filter(agent=agent, revoked_at__isnull=True).update(
        revoked_at=clock.now())
    raw = _new_credential(agent)
    audit_record(actor=None, actor_repr=f"agent:{agent.agent_id}",
                 action="fleet.agent_enrol_retry", obj=agent, changes={})
    return Enrolment("enrolled", agent, raw)


def _new_identity(agent: Agent) -> None:
    """A re-enrolled (reinstalled) host starts its ``seq`` again at 1: it gets a new
    protocol identity, so its reports are not mistaken for resends of the old one's. The
    old credentials are revoked and the old idempotency keys dropped."""
    old_id = agent.agent_id
    AgentCredential.objects.filter(agent=agent, revoked_at__isnull=True).update(
        revoked_at=clock.now())
    AgentReport.objects.filter(agent=agent).delete()
    agent.agent_id, agent.last_seq, agent.last_seen = new_agent_id(), 0, None
    agent.save(update_fields=["agent_id", "last_seq", "last_seen"])
    if agent.node_id is not None:
        desired = NodeDesiredState.objects.select_for_update().filter(node_id=agent.node_id)
        for row in desired:
            row.document = {**row.document, "node_id": agent.agent_id} if row.document else {}
            row.save(update_fields=["document", "updated"])
    audit_record(actor=None, action="fleet.agent_reenrol", obj=agent,
                 changes={"agent_id": [old_id, agent.agent_id]})


def credential_authenticate(raw: str) -> AgentCredential | None:
    """The live credential for ``raw`` (not revoked, not past its overlap), or None."""
    if not raw.startswith("gpn_"):
        return None
    cred = credential_with_node(digest(raw))  # select_related(agent, node, health, observed)
    return cred if cred is not None and _live(cred) else None


def credential_authenticate_for_report(
        raw: str) -> tuple[AgentCredential, telemetry_pg.Previous | None] | None:
    """``credential_authenticate`` and the node's latest telemetry rows, in one statement
    on PostgreSQL (``credentials.credential_with_telemetry``)."""
    if not raw.startswith("gpn_"):
        return None
    found = credential_with_telemetry(digest(raw))
    return found if found is not None and _live(found[0]) else None


def _live(cred: AgentCredential) -> bool:
    """Not past its overlap end (rotation); a revoked one is never loaded."""
    return cred.valid_until is None or cred.valid_until > clock.now()


@transaction.atomic
def credential_rotate(*, agent: Agent) -> tuple[str, datetime]:
    """A new credential; the agent's current ones stay valid until the overlap ends."""
    agent = Agent.objects.select_for_update().get(pk=agent.pk)
    overlap = getattr(settings, "GPUPOOL_AGENT_CREDENTIAL_OVERLAP_S", DEFAULT_OVERLAP_S)
    until = clock.now() + timedelta(seconds=overlap)
    for cred in AgentCredential.objects.filter(agent=agent, revoked_at__isnull=True):
        if cred.valid_until is None or cred.valid_until > until:
            cred.valid_until = until
            cred.save(update_fields=["valid_until"])
    raw = _new_credential(agent)
    audit_record(actor=None, actor_repr=f"agent:{agent.agent_id}",
                 action="fleet.credential_rotate", obj=agent,
                 changes={"previous_valid_until": until.isoformat()})
    return raw, until


@transaction.atomic
def credential_revoke(*, actor: AnyUser | None, agent: Agent) -> int:
    """Revoke every credential of ``agent`` (its next call answers 401)."""
    count = AgentCredential.objects.filter(agent=agent, revoked_at__isnull=True).update(
        revoked_at=clock.now())
    audit_record(actor=actor, action="fleet.credential_revoke", obj=agent,
                 changes={"revoked": count})
    return count
