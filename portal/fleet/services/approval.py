"""Operator approval of an enrolment that would take over an enrolled agent's identity.

A bootstrap token bound to a host name can still be presented by another machine of that
name (a stolen token, a cloned image): enrolling it would hand over the node's desired
state (tenants' SSH keys, partitions, GPU UUIDs) and its health reports. Such an
enrolment is held as an ``EnrolmentRequest`` until a staff member approves or denies it;
the agent retries with the same token and is told ``pending_approval`` meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction

from portal.core import clock
from portal.core.errors import Conflict, NotFound, PermissionDenied
from portal.core.services import audit_record
from portal.fleet.errors import AgentError
from portal.fleet.models import Agent, BootstrapToken, EnrolmentRequest
from portal.tenants.access import AnyUser, is_staff

State = EnrolmentRequest.State


@dataclass(frozen=True)
class Enrolment:
    """What an enrolment came to: ``enrolled`` (with a fresh ``credential``), or
    ``pending``/``denied`` (an operator's decision on a takeover, ``request``)."""

    state: str
    agent: Agent
    credential: str = ""
    request: EnrolmentRequest | None = None


def enrolment_hold(*, token: BootstrapToken, agent: Agent, body: dict[str, Any],
                   now: datetime, remote_addr: str = "") -> Enrolment:
    """Hold the enrolment for an operator (inside ``agent_enrol``'s transaction)."""
    request = EnrolmentRequest.objects.create(
        token=token, agent=agent, role=body["role"], hostname=body["hostname"],
        machine_id=str(body.get("machine_id") or ""), agent_version=body["agent_version"],
        inventory=body.get("inventory") or {}, remote_addr=remote_addr[:64],
        last_attempt=now)
    audit_record(actor=None, actor_repr=f"enrolment:{body['hostname']}",
                 action="fleet.enrolment_held", obj=request,
                 changes={"agent_id": agent.agent_id, "hostname": body["hostname"],
                          "role": body["role"], "remote_addr": remote_addr[:64]})
    return Enrolment(State.PENDING, agent, request=request)


def held_enrolment(*, request: EnrolmentRequest, body: dict[str, Any],
                   now: datetime) -> Enrolment | None:
    """The answer to a retry of a held enrolment (same token): pending or denied, or None
    when approved (the caller completes it). Another host with this token is refused."""
    if (request.hostname, request.role, request.machine_id) != (
            body["hostname"], body["role"], str(body.get("machine_id") or "")):
        raise AgentError("invalid_bootstrap_token", "unknown, used or expired bootstrap token")
    if request.state == State.APPROVED:
        return None
    request.attempts += 1
    request.last_attempt = now
    request.save(update_fields=["attempts", "last_attempt"])
    return Enrolment(request.state, request.agent, request=request)


def enrolment_completed(*, request: EnrolmentRequest) -> None:
    request.state = State.COMPLETED
    request.save(update_fields=["state"])


@transaction.atomic
def enrolment_decide(*, actor: AnyUser, request_id: int, approve: bool,
                     reason: str = "") -> EnrolmentRequest:
    """Approve or deny a pending enrolment (staff only, audited). Approval does not revoke
    anything yet: the old identity is replaced when the waiting agent next retries."""
    if not is_staff(actor):
        raise PermissionDenied("Only staff may decide enrolments.")
    request = EnrolmentRequest.objects.select_for_update().filter(pk=request_id).first()
    if request is None:
        raise NotFound("No such enrolment request.")
    if request.state != State.PENDING:
        raise Conflict(f"This enrolment is already {request.state}.")
    request.state = State.APPROVED if approve else State.DENIED
    request.decided_at, request.decided_by = clock.now(), actor
    request.reason = reason[:200]
    request.save(update_fields=["state", "decided_at", "decided_by", "reason"])
    audit_record(actor=actor, action=f"fleet.enrolment_{'approve' if approve else 'deny'}",
                 obj=request, changes={"hostname": request.hostname, "role": request.role,
                                       "agent_id": request.agent.agent_id, "reason": reason[:200]})
    return request
