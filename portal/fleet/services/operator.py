"""Operators' actions on the service lifecycle, staff only, each with a reason:
cordon (suspect: no new leases), uncordon, send to repair (fenced out of its leases),
validate (the node's agent proves it), return (after a passed validation)."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils.translation import gettext as _

from portal.core.errors import ApplicationError, PermissionDenied
from portal.fleet import lifecycle
from portal.fleet.services import validation
from portal.inventory.models import Gpu, Node, Service
from portal.tenants.access import is_staff

ACTIONS = ("cordon", "uncordon", "repair", "validate", "return")


def _locked(part: Node | Gpu) -> Node | Gpu:
    return lifecycle.lock_node(part) if isinstance(part, Node) else lifecycle.lock_gpu(part)


@transaction.atomic
def service_act(*, actor: Any, part: Node | Gpu, action: str, reason: str,
                level: int = validation.DEFAULT_LEVEL) -> Node | Gpu:
    """One operator action; an action the part's state does not allow is a 409."""
    if not is_staff(actor):
        raise PermissionDenied(_("Only platform staff can do this."))
    if action not in ACTIONS:
        raise ApplicationError(_("Unknown action."), fields={"action": [_("invalid")]})
    if not reason.strip():
        raise ApplicationError(_("Say why."), fields={"reason": [_("required")]})
    cause = f"{action} by {getattr(actor, 'username', 'staff')}: {reason}"[:300]
    if action == "validate":
        validation.validate(part=part, actor=actor, level=level, reason=cause)
    elif action == "return":
        validation.operator_return(part=part, actor=actor, reason=reason)
    else:
        locked = _locked(part)
        target = {"cordon": Service.SUSPECT, "uncordon": Service.IN_SERVICE,
                  "repair": Service.OUT_OF_SERVICE}[action]
        lifecycle.transition(locked, target, cause=cause, actor=actor, rule="operator")
    return _locked(part)
