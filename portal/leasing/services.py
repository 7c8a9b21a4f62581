"""Orders and lease actions a tenant takes: create, quote, cancel, extend, release.

Every write validates first (field-named errors), then writes in one transaction with an
event row; the lifecycle after that (placing, provisioning, expiry) lives in
``portal.leasing.lifecycle`` (services → lifecycle, one way).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, TypeVar

from django.db import DatabaseError, transaction
from django.utils.translation import gettext as _

from portal.core import clock
from portal.core.errors import ApplicationError, PermissionDenied
from portal.core.services import audit_record
from portal.inventory.catalog import CATALOG
from portal.inventory.models import Gpu
from portal.leasing import access_push, allocation, limits, notify, states
from portal.leasing.feasibility import NeverPlaceable, check_order_fits
from portal.leasing.lifecycle import dispatch, expiry, releasing
from portal.leasing.lifecycle.expiry import ExtensionRefused
from portal.leasing.limits import MAX_GPUS_PER_NODE, MAX_NODES
from portal.leasing.models import (
    LOCK,
    MILLI_PER_SLOT,
    Allocation,
    Condition,
    Lease,
    LeaseFault,
    Locality,
    Priority,
    Quota,
)
from portal.leasing.models import LeaseState as S
from portal.leasing.orderspec import OrderSpec, Window
from portal.leasing.quotas import (
    gpu_hours_used,
    gpus_held,
    member_gpus,
    month_bounds,
    pending_orders,
    quota_for,
)
from portal.tenants.access import AnyUser, require_role
from portal.tenants.models import Membership, Role, Tenant

log = logging.getLogger(__name__)
START_GRACE = timedelta(minutes=5)  # "now" sent by a client a little late is still now


class OrderRejected(ApplicationError):
    code = "order_rejected"


class BudgetExceeded(OrderRejected):
    """Over the monthly GPU-hour budget (same code; quotes tell it from a quota refusal)."""


class MemberLimitExceeded(OrderRejected):
    """Over the ordering member's personal limit inside the tenant (same code)."""


def _err(fld: str, msg: str, exc: type[ApplicationError] = ApplicationError) -> ApplicationError:
    return exc(msg, fields={fld: [msg]})


def _check_shape(spec: OrderSpec) -> None:
    unknown = [m for m in spec.models if m not in CATALOG]
    if unknown:
        raise _err("models", _("Unknown GPU model(s): %(models)s.")
                   % {"models": ", ".join(unknown)})
    if spec.mig_profile:
        _check_mig_shape(spec)
        return
    if not isinstance(spec.gpu_count, int) or not 1 <= spec.gpu_count <= MAX_GPUS_PER_NODE:
        raise _err("gpu_count", _("Between 1 and %(max)s GPUs per node.")
                   % {"max": MAX_GPUS_PER_NODE})
    if not isinstance(spec.nodes, int) or not 1 <= spec.nodes <= MAX_NODES:
        raise _err("nodes", _("Between 1 and %(max)s nodes.") % {"max": MAX_NODES})
    if not 0 < spec.gpu_milli <= 1000 or spec.gpu_milli % MILLI_PER_SLOT:
        raise _err("gpu_milli", _("A fraction in steps of %(step)s milli-GPU (1/8).")
                   % {"step": MILLI_PER_SLOT})
    if spec.gpu_milli < 1000 and (spec.gpu_count != 1 or spec.nodes != 1):
        raise _err("gpu_milli", _("A fraction of a GPU is ordered as one GPU on one node."))
    if spec.locality not in Locality.values:
        raise _err("locality", _("One of %(choices)s.")
                   % {"choices": ", ".join(Locality.values)})
    if spec.priority not in Priority.values:
        raise _err("priority", _("One of %(choices)s.")
                   % {"choices": ", ".join(Priority.values)})
    if spec.locality == Locality.NVLINK and spec.nodes > 1:
        raise _err("locality", _("An NVLink domain is inside one node; order one node."))


def mig_models(spec: OrderSpec) -> list[str]:
    """The models a MIG order may land on: those ordered (all must have the profile), or
    every model with the profile."""
    if spec.models:
        return list(spec.models)
    return [m for m in sorted(CATALOG) if spec.mig_profile in allocation.mig_profiles(m)]


def _check_mig_shape(spec: OrderSpec) -> None:
    """A MIG order: a profile of every ordered model, instances on one node, no fraction."""
    models = mig_models(spec)
    lacking = [m for m in models if spec.mig_profile not in allocation.mig_profiles(m)]
    if lacking or not models:
        offered = sorted({p for m in (lacking or sorted(CATALOG))
                          for p in allocation.mig_profiles(m)})
        raise _err("mig_profile", _("Not a MIG profile of %(models)s; one of: %(profiles)s.")
                   % {"models": ", ".join(lacking) or _("any model"),
                      "profiles": ", ".join(offered) or "-"})
    if spec.gpu_milli != 1000:
        raise _err("gpu_milli", _("A MIG instance is not combined with a time-sliced fraction; "
                                  "leave gpu_milli out."))
    if not isinstance(spec.nodes, int) or spec.nodes != 1:
        raise _err("nodes", _("MIG instances are ordered on one node."))
    most = limits.MAX_MIG_INSTANCES_PER_NODE
    if not isinstance(spec.gpu_count, int) or not 1 <= spec.gpu_count <= most:
        raise _err("gpu_count", _("Between 1 and %(max)s MIG instances.") % {"max": most})
    if spec.locality not in Locality.values:
        raise _err("locality", _("One of %(choices)s.")
                   % {"choices": ", ".join(Locality.values)})
    if spec.priority not in Priority.values:
        raise _err("priority", _("One of %(choices)s.")
                   % {"choices": ", ".join(Priority.values)})


def spec_milli(spec: OrderSpec, models: list[str] | None = None) -> int:
    """One unit's GPU equivalents in milli-GPU: the fraction, or a MIG instance's share
    (ADR 0222: the larger of its compute and memory share)."""
    if not spec.mig_profile:
        return spec.gpu_milli
    shares = [allocation.mig_share_milli(m, spec.mig_profile)
              for m in (models or mig_models(spec))]
    return max(shares, default=1000)


def _models_available(spec: OrderSpec) -> list[str]:
    wanted = (mig_models(spec) if spec.mig_profile else spec.models) or sorted(CATALOG)
    have = set(Gpu.objects.filter(model__in=wanted).order_by().values_list("model", flat=True)
               .distinct())  # order_by(): Meta.ordering would make it DISTINCT per GPU
    if not have:
        raise _err("models", _("The pool has no GPUs of the requested model(s)."))
    return [m for m in wanted if m in have]


def _window(spec: OrderSpec, now: datetime) -> Window:
    start = spec.start_at or now
    if start < now - START_GRACE:
        raise _err("start_at", _("The start is in the past."))
    limits.check_start(start, now)
    start = max(start, now)
    if spec.end_at is not None and spec.duration_hours is not None:
        raise _err("end_at", _("Give a duration or an end, not both."))
    if spec.end_at is not None:
        end = spec.end_at
    elif spec.duration_hours is not None:
        try:
            hours = Decimal(spec.duration_hours)
        except (InvalidOperation, TypeError, ValueError):
            raise _err("duration_hours", _("A number of hours.")) from None
        if not hours.is_finite() or hours <= 0:
            raise _err("duration_hours", _("Must be more than zero."))
        if hours > limits.MAX_DURATION_HOURS:
            raise limits.duration_error("duration_hours")
        end = start + timedelta(seconds=int(hours * 3600))
    else:
        raise _err("duration_hours", _("Give a duration or an end."))
    if end <= start:
        raise _err("end_at", _("The end must be after the start."))
    limits.check_end(start, end)
    return Window(start, end)


def _total_gpus(spec: OrderSpec) -> Decimal:
    return Decimal(spec.gpu_count * spec.nodes * spec_milli(spec)) / 1000


def check_limits(tenant: Tenant, spec: OrderSpec, window: Window, models: list[str],
                 exclude_lease: object = None, count_pending: bool = True) -> None:
    """Quota, duration, pending orders, spot and budget. Raises with the field named.

    The order fits if one of its models has both GPU quota and GPU-hour budget left, each
    checked against that model's own usage; else the first model's refusal is raised.
    """
    total = _total_gpus(spec)
    if count_pending and pending_orders(tenant) >= _max_pending(tenant, models):
        raise _err("non_field_errors", _("Too many orders are waiting; cancel one first."),
                   OrderRejected)
    quotas = {model: quota_for(tenant, model) for model in models}
    _check_rows([q for q in quotas.values() if q is not None], spec, window)
    refusals: list[ApplicationError] = []
    for model, quota in quotas.items():
        if quota is None:
            return
        held = gpus_held(tenant, model, window.start, window.end, exclude_lease)
        refusal = (_quota_refusal(model, quota.max_gpus, held) if held + total > quota.max_gpus
                   else _budget_refusal(tenant, model, quota, window, total, exclude_lease))
        if refusal is None:
            return
        refusals.append(refusal)
    if not refusals:
        raise _err("models", _("The pool has no GPUs of the requested model(s)."),
                   OrderRejected)
    raise refusals[0]


def _check_rows(rows: list[Quota], spec: OrderSpec, window: Window) -> None:
    """Duration and spot: every acceptable model's quota row must allow them."""
    for quota in rows:
        if window.hours > quota.max_lease_hours:
            raise _err("duration_hours", _("At most %(hours)s hours per lease.")
                       % {"hours": quota.max_lease_hours}, OrderRejected)
        if spec.priority == Priority.SPOT and not quota.allow_spot:
            raise _err("priority", _("Spot leases are not enabled for this tenant."),
                       OrderRejected)


def _quota_refusal(model: str, limit: int, held: Decimal) -> ApplicationError:
    left = max(Decimal(limit) - held, Decimal(0))
    return _err("gpu_count", _("This would exceed your GPU quota for %(model)s: at most "
                               "%(limit)s GPUs at once, %(left)s free in that period.")
                % {"model": model, "limit": limit, "left": _gpus_text(left)}, OrderRejected)


def _gpus_text(value: Decimal) -> str:
    """4 → "4", 4.500 → "4.5" (no exponent, no trailing zeros)."""
    return f"{value.normalize():f}"


def check_member_limit(actor: AnyUser, tenant: Tenant, spec: OrderSpec) -> None:
    """The ordering member's personal limit (``Membership.max_gpus``), if they have one.

    Counts the GPUs of every non-terminal lease the member created in this tenant (through
    the portal or any of their API keys: a key acts as its user), fractions as fractions,
    plus this order. Not checked on extension: an extension adds time, not GPUs.

    Concurrency: ``order_create`` holds the tenant's row lock (FOR NO KEY UPDATE) while it
    calls this and until it commits, so two orders of one member are serialised: the second
    one counts the first one's lease and cannot pass on a stale sum.
    """
    if not actor.is_authenticated:
        return
    limit = (Membership.objects.filter(tenant=tenant, user=actor)
             .values_list("max_gpus", flat=True).first())
    if limit is None:  # no membership (staff) or no personal limit
        return
    held = member_gpus(tenant, [actor.pk]).get(actor.pk, Decimal(0))
    if held + _total_gpus(spec) > limit:
        raise _err("gpu_count", _("Your personal limit in this tenant is %(limit)s GPUs; "
                                  "you hold or wait for %(held)s.")
                   % {"limit": limit, "held": _gpus_text(held)}, MemberLimitExceeded)


def _max_pending(tenant: Tenant, models: list[str]) -> int:
    limits = [q.max_pending_orders for m in models if (q := quota_for(tenant, m))]
    return min(limits) if limits else 20


def _budget_refusal(tenant: Tenant, model: str, quota: Quota, window: Window,
                    total: Decimal, exclude_lease: object) -> ApplicationError | None:
    """Over ``model``'s monthly GPU-hour budget? Charged with that model's metered and
    committed hours only (``portal.leasing.quotas.gpu_hours_used``)."""
    if quota.gpu_hour_budget is None:
        return None
    month_start, month_end = month_bounds(window.start)
    used = gpu_hours_used(tenant, model, month_start, month_end, clock.now(), exclude_lease)
    inside = min(window.end, month_end) - max(window.start, month_start)
    wanted = Decimal(max(inside.total_seconds(), 0)) / 3600 * total
    if used.total + wanted <= quota.gpu_hour_budget:
        return None
    left = max(quota.gpu_hour_budget - used.total, Decimal(0))
    return _err("duration_hours", _("This would exceed the monthly budget for %(model)s: "
                                    "%(budget)s GPU-hours, %(left)s left; this order needs "
                                    "%(wanted)s.")
                % {"model": model, "budget": f"{quota.gpu_hour_budget:.1f}",
                   "left": f"{left:.1f}", "wanted": f"{wanted:.1f}"}, BudgetExceeded)


def validate_order(*, actor: AnyUser, tenant: Tenant, spec: OrderSpec,
                   now: datetime) -> tuple[Window, list[str]]:
    require_role(actor, tenant, Role.MEMBER)
    if not tenant.is_active:
        raise PermissionDenied(_("This tenant is suspended and cannot order."))
    _check_shape(spec)
    models = _models_available(spec)
    window = _window(spec, now)
    if spec.mig_profile:
        check_mig_offered(models)
    else:
        check_order_fits(tenant=tenant, spec=spec, window=window, models=models, now=now)
    check_limits(tenant, spec, window, models)
    check_member_limit(actor, tenant, spec)
    return window, models


def check_mig_offered(models: list[str]) -> None:
    """A MIG order needs a GPU of its models that an operator offers for MIG."""
    if not allocation.mig_capable(models):
        raise _err("mig_profile", _("No %(models)s GPU of the pool is offered for MIG "
                                    "instances.") % {"models": "/".join(models)},
                   NeverPlaceable)


@transaction.atomic
def order_create(*, actor: AnyUser, tenant: Tenant, spec: OrderSpec,
                 idempotency_key: str | None = None) -> Lease:
    """Validate and queue an order; a scheduling pass runs when the transaction commits."""
    # One order at a time per tenant: the pending-orders, quota and per-member limit checks
    # below count rows, and two concurrent orders would both pass them (seen in the race
    # harness). The lock is held until commit, so the next order counts this one's lease.
    Tenant.objects.select_for_update(no_key=True).filter(pk=tenant.pk).first()
    now = clock.now()
    window, models = validate_order(actor=actor, tenant=tenant, spec=spec, now=now)
    lease = _requested(actor, tenant, spec, window, models)
    states.transition(lease, S.QUEUED, actor=actor.get_username(), reason="order accepted",
                      data={"spec": _jsonable(spec), "idempotency_key": idempotency_key})
    audit_record(actor=actor, action="order.create", obj=lease,
                 changes={"gpus": str(lease.total_gpus), "models": models})
    dispatch.schedule_pass_on_commit()
    return lease


def _requested(actor: AnyUser, tenant: Tenant, spec: OrderSpec, window: Window,
               models: list[str]) -> Lease:
    """The order's row, REQUESTED: it leaves that state in the same transaction."""
    return Lease.objects.create(
        tenant=tenant, created_by=actor if actor.is_authenticated else None,
        name=spec.name[:100], tags=spec.tags, allowed_models=models,
        gpu_count=spec.gpu_count, gpu_milli=spec_milli(spec, models), nodes=spec.nodes,
        mig_profile=spec.mig_profile, locality=spec.locality,
        locality_required=spec.locality_required,
        priority=spec.priority, start_at=window.start, end_at=window.end,
        state=S.REQUESTED)


T = TypeVar("T")


def order_submit(*, actor: AnyUser, tenant: Tenant, spec: OrderSpec,
                 create: Callable[[], T]) -> T:
    """What the order interfaces call: ``create`` (``order_create``, maybe under an
    Idempotency-Key); an order it refuses by policy (quota, budget, pending orders, spot,
    a member's limit: :class:`OrderRejected`) is recorded as a REJECTED lease with the
    reason once the refused transaction has rolled back (ADR 0132), then the refusal is
    raised as before (4xx naming the field). Bad input records nothing."""
    try:
        return create()
    except OrderRejected as refusal:
        try:
            lease = order_reject(actor=actor, tenant=tenant, spec=spec, refusal=refusal)
        except DatabaseError:  # the answer is the refusal; its record is best effort
            log.exception("could not record the rejected order")
        else:
            if lease is not None:  # the answer names the record (GET /leases/{id})
                refusal.refs["lease_id"] = str(lease.pk)
        raise


@transaction.atomic
def order_reject(*, actor: AnyUser, tenant: Tenant, spec: OrderSpec,
                 refusal: ApplicationError) -> Lease | None:
    """Record a refused order: REQUESTED → REJECTED, its reason in ``state_reason``."""
    try:
        window = _window(spec, clock.now())
        models = _models_available(spec)
    except ApplicationError:  # (the refusal came after these passed; time moved on)
        return None
    lease = _requested(actor, tenant, spec, window, models)
    states.transition(lease, S.REJECTED, actor=actor.get_username(), reason=refusal.message,
                      data={"spec": _jsonable(spec), "error": refusal.code,
                            "fields": refusal.fields})
    audit_record(actor=actor, action="order.reject", obj=lease,
                 changes={"reason": refusal.message})
    notify.lease_changed(lease)
    return lease


def _jsonable(spec: OrderSpec) -> dict[str, Any]:
    return {k: (str(v) if isinstance(v, Decimal | datetime) else v)
            for k, v in asdict(spec).items()}


def _locked(lease: Lease) -> Lease:
    return Lease.objects.select_for_update(**LOCK).select_related("tenant").get(pk=lease.pk)


@transaction.atomic
def lease_cancel(*, actor: AnyUser, lease: Lease, reason: str = "") -> Lease:
    require_role(actor, lease.tenant, Role.MEMBER)
    lease = _locked(lease)
    if lease.state not in states.CANCELLABLE:
        raise _err("state", _("A %(state)s lease cannot be cancelled; release it instead.")
                   % {"state": states.label(lease.state).lower()}, states.IllegalTransition)
    releasing.cancel(lease, actor=actor.get_username(), reason=reason or "cancelled")
    audit_record(actor=actor, action="lease.cancel", obj=lease, changes={"reason": reason})
    return lease


@transaction.atomic
def lease_release(*, actor: AnyUser, lease: Lease, reason: str = "") -> Lease:
    require_role(actor, lease.tenant, Role.MEMBER)
    lease = _locked(lease)
    if lease.state not in states.RELEASABLE:
        raise _err("state", _("Only an active lease can be released; cancel a waiting one."),
                   states.IllegalTransition)
    releasing.begin_release(lease, kind=S.ENDED, actor=actor.get_username(),
                            reason=reason or "released early")
    audit_record(actor=actor, action="lease.release", obj=lease, changes={"reason": reason})
    return lease


@transaction.atomic
def lease_extend(*, actor: AnyUser, lease: Lease, end_at: datetime) -> Lease:
    """Move the end later if quota, budget and the calendar allow; else say how far."""
    require_role(actor, lease.tenant, Role.MEMBER)
    lease = _locked(lease)
    if lease.state == S.NOTICE:
        raise ExtensionRefused(_("This spot lease is being preempted: its GPUs are needed by "
                                 "an on-demand order."), lease.end_at)
    if lease.state not in states.EXTENDABLE:
        raise _err("state", _("This lease can no longer be extended."),
                   states.IllegalTransition)
    if end_at <= lease.end_at:
        raise _err("end_at", _("The new end must be later than the current end."))
    limits.check_end(lease.start_at, end_at)
    spec = OrderSpec(models=[lease.gpu_model] if lease.gpu_model else lease.allowed_models,
                     gpu_count=lease.gpu_count, gpu_milli=lease.gpu_milli, nodes=lease.nodes,
                     priority=lease.priority, mig_profile=lease.mig_profile)
    extra = Window(lease.end_at, end_at)
    longest = _longest_end(lease)
    try:
        check_limits(lease.tenant, spec, Window(lease.start_at, end_at), spec.models or
                     lease.allowed_models, exclude_lease=lease.pk, count_pending=False)
    except ApplicationError as exc:
        raise ExtensionRefused(exc.message, longest) from exc
    if lease.state != S.QUEUED and longest is not None and end_at > longest:
        raise ExtensionRefused(_("The GPUs are reserved by another lease from %(start)s UTC.")
                               % {"start": f"{longest:%Y-%m-%d %H:%M}"}, longest)
    old_end = lease.end_at
    expiry.extend(lease, end_at)
    states.record(lease, "extended", actor=actor.get_username(),
                  data={"from": old_end.isoformat(), "to": end_at.isoformat(),
                        "hours": str(extra.hours)})
    audit_record(actor=actor, action="lease.extend", obj=lease,
                 changes={"end_at": [old_end.isoformat(), end_at.isoformat()]})
    access_push.push_lease_on_commit(lease)  # the grants' not_after moves
    return lease


def _longest_end(lease: Lease) -> datetime | None:
    if lease.state == S.QUEUED or not Allocation.objects.filter(lease=lease, live=True).exists():
        return None
    result = allocation.extension(lease, lease.end_at + timedelta(days=3660))
    return None if result.ok else allocation.from_epoch(result.longest_end)


DEGRADED_CHOICES = ("continue", "wait", "release")


@transaction.atomic
def lease_degraded_choose(*, actor: AnyUser, lease: Lease, choice: str) -> Lease:
    """A degraded lease's tenant decides: ``continue`` smaller (its open faults close; the
    failed GPUs stay unbilled), ``wait`` for a replacement (re-tried each beat, ahead of
    new orders), or ``release`` it (the failed part is not charged either way)."""
    require_role(actor, lease.tenant, Role.MEMBER)
    if choice not in DEGRADED_CHOICES:
        raise _err("choice", _("Choose continue, wait or release."))
    lease = _locked(lease)
    if lease.condition != Condition.DEGRADED or lease.state not in states.RUNNING:
        raise _err("choice", _("This lease is not degraded."), states.IllegalTransition)
    if choice == "release":
        return lease_release(actor=actor, lease=lease, reason="released while degraded")
    if choice == "continue":
        releasing.resolve_faults(lease, LeaseFault.Resolution.SMALLER)
        lease.condition = Condition.HEALTHY
        lease.save(update_fields=["condition", "updated"])
    states.record(lease, "degraded_choice", actor=actor.get_username(), reason=choice)
    audit_record(actor=actor, action="lease.degraded_choice", obj=lease,
                 changes={"choice": choice})
    return lease
