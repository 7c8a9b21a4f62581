"""Writes of the core app: the audit log."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import models

from portal.core import context
from portal.core.models import AuditLog


def audit_record(*, actor: AbstractBaseUser | AnonymousUser | None, action: str,
                 obj: models.Model | None = None, tenant: Any = None,
                 changes: dict[str, Any] | None = None, actor_repr: str = "") -> AuditLog:
    """Append one audit entry. Call it inside the service's transaction."""
    ctx = context.current()
    user = actor if actor is not None and getattr(actor, "is_authenticated", False) else None
    if tenant is None and obj is not None:
        tenant = getattr(obj, "tenant", None)
        if tenant is None and obj._meta.label == "tenants.Tenant":
            tenant = obj
    return AuditLog.objects.create(
        actor=user,
        actor_repr=actor_repr or (user.get_username() if user else "system"),
        action=action,
        object_type=obj._meta.label_lower if obj is not None else "",
        object_id=str(obj.pk) if obj is not None else "",
        object_repr=str(obj)[:200] if obj is not None else "",
        tenant=tenant,
        changes=changes or {},
        ip=ctx.ip,
        user_agent=ctx.user_agent,
        via=ctx.via,
    )


def model_changes(instance: models.Model, fields: list[str],
                  before: dict[str, Any]) -> dict[str, list[Any]]:
    """``{field: [old, new]}`` for the fields whose value changed."""
    out: dict[str, list[Any]] = {}
    for name in fields:
        new = getattr(instance, name)
        if before.get(name) != new:
            out[name] = [_jsonable(before.get(name)), _jsonable(new)]
    return out


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)
