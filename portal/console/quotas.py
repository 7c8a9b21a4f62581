"""Staff set a tenant's quota for one GPU model (or the tenant-wide row): atomic, audited.

Lowering a limit below what the tenant uses right now is allowed, but only when the caller
says so (``confirm=True``): running leases are never preempted by a quota change, they
simply keep their GPUs until they end, and new orders wait until usage is under the limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import transaction
from django.utils.translation import gettext as _

from portal.console import selectors
from portal.console.services import _staff
from portal.core.errors import ApplicationError
from portal.core.services import audit_record, model_changes
from portal.leasing.limits import MAX_DURATION_HOURS
from portal.leasing.models import Quota
from portal.tenants.models import Tenant

INT_MAX = 2_147_483_647  # PositiveIntegerField on PostgreSQL
LIMITS = {"max_gpus": 1_000_000, "guaranteed_gpus": 1_000_000,
          "max_lease_hours": MAX_DURATION_HOURS, "max_pending_orders": 100_000}
BUDGET_MAX = Decimal("9999999999.99")  # max_digits=12, decimal_places=2
FIELDS = ["max_gpus", "guaranteed_gpus", "gpu_hour_budget", "max_lease_hours",
          "max_pending_orders", "allow_spot", "allow_borrowing"]
CONFIRM = "confirm_required"


@dataclass(frozen=True)
class QuotaChange:
    quota: Quota
    created: bool
    changes: dict[str, list[Any]]
    warnings: list[str] = field(default_factory=list)


def _count(errors: dict[str, list[str]], name: str, value: Any, *,
           minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        errors[name] = [_("Enter a whole number.")]
    elif value < minimum:
        errors[name] = [_("Must be at least %(n)s.") % {"n": minimum}]
    elif value > LIMITS[name]:
        errors[name] = [_("Must be at most %(n)s.") % {"n": LIMITS[name]}]
    else:
        return value
    return 0


def _budget(errors: dict[str, list[str]], value: Any) -> Decimal | None:
    if value is None or value == "":
        return None
    try:
        budget = Decimal(str(value))
    except (InvalidOperation, ValueError):
        budget = Decimal("NaN")
    if not budget.is_finite():
        errors["gpu_hour_budget"] = [_("Enter a number.")]
    elif budget < 0:
        errors["gpu_hour_budget"] = [_("Must not be negative.")]
    elif budget > BUDGET_MAX:
        errors["gpu_hour_budget"] = [_("Must be at most %(n)s.") % {"n": BUDGET_MAX}]
    elif budget != budget.quantize(Decimal("0.01")):
        errors["gpu_hour_budget"] = [_("At most 2 decimal places.")]
    else:
        return budget.quantize(Decimal("0.01"))
    return None


def _model(tenant: Tenant, gpu_model: Any) -> str:
    if not isinstance(gpu_model, str):
        raise ApplicationError(_("Unknown GPU model."),
                               fields={"gpu_model": [_("Unknown GPU model.")]})
    model: str = gpu_model.strip()
    if model == "" or model in selectors.gpu_models():
        return model
    # A model that left the inventory may still have a row: it can be edited, not created.
    if Quota.objects.filter(tenant=tenant, gpu_model=model).exists():
        return model
    raise ApplicationError(_("No GPUs of model %(model)s are in the inventory.") % {"model": model},
                           fields={"gpu_model": [_("Not a GPU model of the inventory.")]})


def quota_warnings(*, tenant: Tenant, gpu_model: str, max_gpus: int,
                   gpu_hour_budget: Decimal | None, before: Quota | None) -> dict[str, str]:
    """Field → warning for each limit lowered (or set) below what is in use now."""
    out: dict[str, str] = {}
    held = selectors.gpus_in_use(tenant)
    own = set(Quota.objects.filter(tenant=tenant).exclude(gpu_model="")
              .values_list("gpu_model", flat=True)) | ({gpu_model} if gpu_model else set())
    in_use = selectors.quota_in_use(gpu_model, held, own)
    lowered = before is None or max_gpus < before.max_gpus
    if lowered and max_gpus < in_use:
        out["max_gpus"] = _(
            "The tenant holds %(held)s GPUs of this quota now, more than %(limit)s. Running "
            "leases are not preempted; new orders wait until usage is under the limit.") % {
            "held": f"{in_use.normalize():f}", "limit": max_gpus}
    if gpu_hour_budget is not None and (
            before is None or before.gpu_hour_budget is None
            or gpu_hour_budget < before.gpu_hour_budget):
        row = Quota(tenant=tenant, gpu_model=gpu_model)
        used = selectors.gpu_hours_this_month(tenant, row)
        if gpu_hour_budget < used:
            out["gpu_hour_budget"] = _(
                "%(used)s GPU-hours are already used or planned this month, more than "
                "%(budget)s. Running leases are not preempted; new orders are refused until "
                "next month.") % {"used": used, "budget": gpu_hour_budget}
    return out


@transaction.atomic
def quota_set(*, actor: Any, tenant: Tenant, gpu_model: str, max_gpus: int,
              guaranteed_gpus: int, gpu_hour_budget: Decimal | None, max_lease_hours: int,
              max_pending_orders: int | None = None, allow_spot: bool | None = None,
              allow_borrowing: bool | None = None, reason: str = "",
              confirm: bool = False) -> QuotaChange:
    """Create or update ``tenant``'s quota row for ``gpu_model`` ('' = tenant-wide).

    ``None`` for the optional limits keeps the row's value (a new row: the defaults).
    Lowering a limit below current use raises ``ApplicationError(code="confirm_required")``
    naming the fields, unless ``confirm`` is true; then the change is made and audited with
    the warnings, and running leases keep their GPUs.
    """
    _staff(actor)
    gpu_model = _model(tenant, gpu_model)
    errors: dict[str, list[str]] = {}
    max_gpus = _count(errors, "max_gpus", max_gpus)
    guaranteed_gpus = _count(errors, "guaranteed_gpus", guaranteed_gpus)
    if not errors and guaranteed_gpus > max_gpus:
        errors["guaranteed_gpus"] = [_("Must not exceed max GPUs.")]
    budget = _budget(errors, gpu_hour_budget)
    max_lease_hours = _count(errors, "max_lease_hours", max_lease_hours, minimum=1)
    if max_pending_orders is not None:
        max_pending_orders = _count(errors, "max_pending_orders", max_pending_orders)
    if errors:
        raise ApplicationError(_("Check the quota's values."), fields=errors)
    # Serialise quota edits of one tenant (no-key lock: rows referencing it stay insertable).
    Tenant.objects.select_for_update(no_key=True).filter(pk=tenant.pk).first()
    before = Quota.objects.select_for_update().filter(tenant=tenant, gpu_model=gpu_model).first()
    warnings = quota_warnings(tenant=tenant, gpu_model=gpu_model, max_gpus=max_gpus,
                              gpu_hour_budget=budget, before=before)
    if warnings and not confirm:
        raise ApplicationError(_("This lowers a limit below current use; confirm to apply it."),
                               fields={k: [v] for k, v in warnings.items()}, code=CONFIRM)
    quota = before or Quota(tenant=tenant, gpu_model=gpu_model)
    old = {name: getattr(quota, name) for name in FIELDS} if before else {}
    quota.max_gpus, quota.guaranteed_gpus = max_gpus, guaranteed_gpus
    quota.gpu_hour_budget, quota.max_lease_hours = budget, max_lease_hours
    for name, value in (("max_pending_orders", max_pending_orders), ("allow_spot", allow_spot),
                        ("allow_borrowing", allow_borrowing)):
        if value is not None:
            setattr(quota, name, bool(value) if name.startswith("allow") else value)
    changes = model_changes(quota, FIELDS, old)
    if before is not None and not changes:
        return QuotaChange(quota=quota, created=False, changes={})
    quota.save()
    entry: dict[str, Any] = {**changes, "reason": reason}
    if warnings:
        entry["below_current_use"] = warnings
    audit_record(actor=actor, action="quota.update" if before else "quota.create", obj=quota,
                 tenant=tenant, changes=entry)
    return QuotaChange(quota=quota, created=before is None, changes=changes,
                       warnings=list(warnings.values()))
