"""What the tenants app announces (portal/core/hooks.py): who may log in changed."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from portal.core.hooks import Hook

# payload: the ids (as strings) of the tenants whose host logins must be re-derived
access_changed: Hook[list[str]] = Hook("tenants.access_changed")


def access_changed_on_commit(tenant_ids: Iterable[Any]) -> None:
    """Call from inside a service transaction: a member removed, a role changed, an SSH key
    added or deleted, a user deactivated, a tenant suspended or resumed. Leasing pushes the
    nodes of those tenants' running leases once the change commits."""
    ids = sorted({str(t) for t in tenant_ids})
    if ids:
        access_changed.emit_on_commit(ids)
