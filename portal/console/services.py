"""Writes of the operators' console. Each is staff-only, atomic and audited."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import transaction
from django.utils.translation import gettext as _

from portal.billing import services as billing
from portal.billing.models import CreditLine, Price, TenantContract
from portal.core.errors import ApplicationError, PermissionDenied
from portal.core.services import audit_record
from portal.inventory.models import Gpu
from portal.leasing.models import Lease, Priority
from portal.tenants.access import is_staff
from portal.tenants.models import Tenant

BOOST_RANGE = range(-1000, 1001)


def _staff(actor: Any) -> None:
    if not is_staff(actor):
        raise PermissionDenied(_("Only platform staff can do this."))


@transaction.atomic
def lease_set_queue_boost(*, actor: Any, lease: Lease, boost: int, reason: str = "") -> Lease:
    """Manual prioritisation of a waiting order (higher boost = considered earlier)."""
    _staff(actor)
    if boost not in BOOST_RANGE:
        raise ApplicationError(_("Boost must be between -1000 and 1000."),
                               fields={"boost": [_("out of range")]})
    lease = Lease.objects.select_for_update().get(pk=lease.pk)
    old = lease.queue_boost
    if old != boost:
        Lease.objects.filter(pk=lease.pk).update(queue_boost=boost)
        lease.queue_boost = boost
        audit_record(actor=actor, action="lease.queue_boost", obj=lease,
                     changes={"queue_boost": [old, boost], "reason": reason})
    return lease


@transaction.atomic
def gpu_set_health(*, actor: Any, gpu: Gpu, health: str, reason: str = "") -> Gpu:
    """Quarantine a GPU (no new placements) or release it back to healthy."""
    _staff(actor)
    if health not in (Gpu.Health.QUARANTINED, Gpu.Health.HEALTHY):
        raise ApplicationError(_("Quarantine or release only."), fields={"health": [_("invalid")]})
    gpu = Gpu.objects.select_for_update().get(pk=gpu.pk)
    old = gpu.health
    if old != health:
        gpu.health = health
        gpu.save(update_fields=["health"])
        audit_record(actor=actor, action="gpu.quarantine" if health == "quarantined"
                     else "gpu.release", obj=gpu, changes={"health": [old, health],
                                                           "reason": reason})
    return gpu


def _decimal(errors: dict[str, list[str]], name: str, value: Any, *, places: int,
             limit: Decimal, minimum: Decimal | None = None) -> Decimal:
    """A finite Decimal of at most ``places`` decimals within [minimum, limit] (else noted)."""
    try:
        number = Decimal(str(value))
    except (InvalidOperation, ValueError):
        number = Decimal("NaN")
    if not number.is_finite():
        errors[name] = [_("Enter a number.")]
    elif minimum is not None and number < minimum:
        errors[name] = [_("Must be at least %(n)s.") % {"n": minimum}]
    elif abs(number) > limit:
        errors[name] = [_("Must be at most %(n)s in size.") % {"n": limit}]
    elif number != number.quantize(Decimal(1).scaleb(-places)):
        errors[name] = [_("At most %(n)s decimal places.") % {"n": places}]
    else:
        return number
    return Decimal(0)


def _aware(errors: dict[str, list[str]], name: str, value: Any) -> None:
    if not isinstance(value, datetime) or value.tzinfo is None:
        errors[name] = [_("Enter a date and time (UTC).")]


def _known_model(gpu_model: str) -> bool:
    return (gpu_model == "" or Gpu.objects.filter(model=gpu_model).exists()
            or Price.objects.filter(gpu_model=gpu_model).exists())


@transaction.atomic
def contract_add(*, actor: Any, tenant: Tenant, effective_from: datetime, gpu_model: str = "",
                 priority: str = "", unit_price: Decimal | None = None,
                 discount_percent: Decimal | None = None, effective_to: datetime | None = None,
                 reference: str = "") -> TenantContract:
    """A contract price or a discount on the list price for ``tenant``, from a future hour.

    Checks what the table's constraints would otherwise turn into database errors, then
    hands over to ``billing.services.contract_create`` (which audits).
    """
    _staff(actor)
    errors: dict[str, list[str]] = {}
    gpu_model = (gpu_model or "").strip()
    if not _known_model(gpu_model):
        errors["gpu_model"] = [_("Not a GPU model of the inventory or the price book.")]
    if priority and priority not in Priority.values:
        errors["priority"] = [_("Unknown priority.")]
    if unit_price is not None:
        unit_price = _decimal(errors, "unit_price", unit_price, places=4,
                              limit=Decimal("99999999.9999"), minimum=Decimal(0))
    discount = Decimal(0)
    if discount_percent is not None:
        discount = _decimal(errors, "discount_percent", discount_percent, places=2,
                            limit=Decimal(100), minimum=Decimal(0))
    if "unit_price" not in errors and "discount_percent" not in errors:
        if unit_price is None and not discount:
            errors["unit_price"] = [_("Give a contract price or a discount.")]
        elif unit_price is not None and discount:
            errors["discount_percent"] = [_("Give a contract price or a discount, not both.")]
    _aware(errors, "effective_from", effective_from)
    if effective_to is not None:
        _aware(errors, "effective_to", effective_to)
        if not errors.get("effective_to") and not errors.get("effective_from"):
            if effective_to <= effective_from:
                errors["effective_to"] = [_("Must be after the start.")]
            elif effective_to.minute or effective_to.second or effective_to.microsecond:
                errors["effective_to"] = [_("must be a whole hour")]
    if len(reference or "") > 100:
        errors["reference"] = [_("At most 100 characters.")]
    if errors:
        raise ApplicationError(_("Check the contract's values."), fields=errors)
    return billing.contract_create(
        actor=actor, tenant=tenant, effective_from=effective_from, gpu_model=gpu_model,
        priority=priority or "", unit_price=unit_price, discount_percent=discount,
        effective_to=effective_to, reference=(reference or "").strip())


@transaction.atomic
def credit_add(*, actor: Any, tenant: Tenant, amount: Decimal, description: str,
               period_start: datetime, period_end: datetime,
               category: str = CreditLine.Category.CREDIT) -> CreditLine:
    """A manual credit (negative) or adjustment on the tenant's first open invoice.

    Checks the input, then hands over to ``billing.services.credit_create`` (which audits).
    """
    _staff(actor)
    errors: dict[str, list[str]] = {}
    if category not in CreditLine.Category.values:
        errors["category"] = [_("Unknown category.")]
    amount = _decimal(errors, "amount", amount, places=2, limit=Decimal("999999999999.99"))
    if "amount" not in errors:
        if not amount:
            errors["amount"] = [_("Must not be zero.")]
        elif category == CreditLine.Category.CREDIT and amount > 0:
            errors["amount"] = [_("A credit is a negative amount (money back to the tenant).")]
    description = (description or "").strip()
    if not description:
        errors["description"] = [_("Say what the credit is for.")]
    elif len(description) > 300:
        errors["description"] = [_("At most 300 characters.")]
    _aware(errors, "period_start", period_start)
    _aware(errors, "period_end", period_end)
    if not errors.get("period_start") and not errors.get("period_end") \
            and period_end <= period_start:
        errors["period_end"] = [_("Must be after the start.")]
    if errors:
        raise ApplicationError(_("Check the credit's values."), fields=errors)
    return billing.credit_create(actor=actor, tenant=tenant, amount=amount,
                                 description=description, period_start=period_start,
                                 period_end=period_end, category=category)
