"""Proven before it returns: a repaired node or GPU is validated by its node agent.

``validate`` moves the part from repair to ``validating`` and asks the node's agent for a
run (desired ``validation``: ``{"id", "level"}``; NVIDIA's guidance: DCGM level 1 as a
readiness check, 2 after a failure, 3 before returning hardware). The agent checks that
every GPU is visible, ECC and remap counters are clean, clocks and power are sane and the
IB ports are active at their rate (``dcgmi diag`` too where DCGM is installed), and
reports the result (observed ``validation``). A pass returns the part to service — unless
it flaps (``lifecycle.flapping``): then it waits for an operator. A failure sends it back
to repair with the checks that failed as the cause.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils.translation import gettext as _

from portal.core import clock
from portal.core.errors import ApplicationError, Conflict
from portal.fleet import lifecycle, protocol
from portal.fleet.models import NodeDesiredState, NodeValidation
from portal.fleet.selectors import pending_validation
from portal.fleet.services.desired import node_desired_set
from portal.inventory.models import Gpu, Node, Service

DEFAULT_LEVEL = 2  # after a failure (NVIDIA's DCGM guidance)


class AgentTooOld(Conflict):
    """The node's agent is of a release that cannot run validation (N-1 upgrades)."""


def agent_can_validate(node: Node) -> bool:
    return protocol.supports(node.agent_version, "validation")


def too_old_message(node: Node) -> str:
    return _("The agent of %(node)s is %(version)s and cannot run validation; upgrade it to "
             "%(first)s or later, then validate again.") % {
        "node": node.hostname, "version": node.agent_version,
        "first": protocol.first_release("validation")}


def _parts_validating(node: Node) -> list[Node | Gpu]:
    parts: list[Node | Gpu] = [node] if node.service == Service.VALIDATING else []
    return parts + list(Gpu.objects.select_for_update().filter(node=node,
                                                               service=Service.VALIDATING))


@transaction.atomic
def validate(*, part: Node | Gpu, actor: Any = None, level: int = DEFAULT_LEVEL,
             reason: str = "") -> NodeValidation:
    """Repair done: prove it. The part goes to ``validating``; its node's agent is asked
    for a run (one run covers the node and every GPU validating on it)."""
    if level not in (1, 2, 3):
        raise ApplicationError(_("Level must be 1, 2 or 3."), fields={"level": [_("invalid")]})
    locked = lifecycle.lock_node(part) if isinstance(part, Node) else lifecycle.lock_gpu(part)
    node = locked if isinstance(locked, Node) else locked.node
    if not agent_can_validate(node):  # it would wait for a result that never comes
        raise AgentTooOld(too_old_message(node),
                          fields={"agent_version": [_("upgrade the agent")]})
    lifecycle.transition(locked, Service.VALIDATING, actor=actor,
                         cause=reason or f"validation requested (level {level})")
    run = pending_validation(node)
    if run is None or run.level < level:
        NodeValidation.objects.filter(node=node, finished_at__isnull=True).update(
            finished_at=clock.now(), passed=False, checks=[{"name": "superseded", "ok": False}])
        who = getattr(actor, "username", "") or "system"
        run = NodeValidation.objects.create(node=node, level=level, requested_by=who)
    _republish(node)
    return run


def _republish(node: Node) -> None:
    """Write the node's desired document again with the validation request in it."""
    row = NodeDesiredState.objects.filter(node=node).first()
    doc = row.document if row is not None else {}
    node_desired_set(node=node, partitions=doc.get("partitions") or [],
                     access_grants=doc.get("access_grants") or [])


def _failed_checks(checks: list[dict[str, Any]], gpu: Gpu | None) -> list[str]:
    out = []
    for check in checks:
        if check.get("ok") is True or check.get("skipped") is True:
            continue
        index = check.get("gpu_index")
        if gpu is not None and index is not None and index != gpu.index:
            continue  # another GPU's problem
        out.append(f"{check.get('name', '?')}: {check.get('detail', '')}".strip(": "))
    return out


@transaction.atomic
def observed(*, node: Node, result: dict[str, Any]) -> bool:
    """The agent reported a validation result: settle the run and its parts (idempotent:
    a result already recorded, or for a run not asked, changes nothing). A run still going
    (``running``, no ``finished_at``) is not a result yet."""
    if result.get("running") is True or result.get("finished_at") is None:
        return False
    run = (NodeValidation.objects.select_for_update()
           .filter(node=node, request_id=str(result.get("id") or ""),
                   finished_at__isnull=True).first())
    if run is None:
        return False
    checks = [c for c in result.get("checks") or [] if isinstance(c, dict)]
    run.finished_at, run.passed, run.checks = clock.now(), result.get("passed") is True, checks
    run.save(update_fields=["finished_at", "passed", "checks"])
    node = lifecycle.lock_node(node)
    for part in _parts_validating(node):
        _settle(part, run, checks)
    _republish(node)  # the request leaves the desired document
    return True


def _settle(part: Node | Gpu, run: NodeValidation, checks: list[dict[str, Any]]) -> None:
    failed = _failed_checks(checks, part if isinstance(part, Gpu) else None)
    if not run.passed and (failed or isinstance(part, Node)):
        cause = "validation failed: " + ("; ".join(failed) or "no detail")
        lifecycle.transition(part, Service.OUT_OF_SERVICE, cause=cause, rule="validation")
    elif lifecycle.flapping(part):
        part.service_cause = "passed validation; it flaps — an operator returns it"
        part.save(update_fields=["service_cause"])
    else:
        return_to_service(part, cause=f"passed validation {run.request_id} "
                                      f"(level {run.level})")


def return_to_service(part: Node | Gpu, *, cause: str, actor: Any = None) -> None:
    """Validating → in service (the part is locked by the caller); a GPU's symptom clears."""
    lifecycle.transition(part, Service.IN_SERVICE, cause=cause, actor=actor)
    if isinstance(part, Gpu) and part.health != Gpu.Health.HEALTHY:
        part.health = Gpu.Health.HEALTHY
        part.save(update_fields=["health"])


@transaction.atomic
def operator_return(*, part: Node | Gpu, actor: Any, reason: str) -> None:
    """An operator returns a part that passed its last validation (a flapping one too)."""
    locked = lifecycle.lock_node(part) if isinstance(part, Node) else lifecycle.lock_gpu(part)
    node = locked if isinstance(locked, Node) else locked.node
    last = NodeValidation.objects.filter(node=node, finished_at__isnull=False).first()
    if locked.service != Service.VALIDATING or last is None or not last.passed:
        raise lifecycle.IllegalServiceTransition(
            _("Only hardware that passed its last validation can return to service."),
            fields={"service": [_("validate it first")]})
    return_to_service(locked, cause=f"returned by an operator: {reason}"[:300], actor=actor)
