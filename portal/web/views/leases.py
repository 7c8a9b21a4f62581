"""Leases: list with filters, calendar, the lease page and its actions."""

from __future__ import annotations

from datetime import datetime, time, timedelta
from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _

from portal.core import clock
from portal.core.errors import ApplicationError
from portal.leasing import states
from portal.leasing.models import LeaseState
from portal.tenants.models import Role
from portal.web import live, waits
from portal.web.forms import ExtendForm, LeaseFilterForm, ReasonForm
from portal.web.views._common import apply_errors, can, tenant_page
from portal.web.views.dashboard import LIVE_STATES

PAGE_SIZE = 25
CALENDAR_DAYS = 14


def _day_start(day: Any) -> datetime | None:
    if day is None:
        return None
    return timezone.make_aware(datetime.combine(day, time.min), timezone.get_current_timezone())


def _filtered(request: HttpRequest, form: LeaseFilterForm) -> Any:
    from portal.leasing.selectors import lease_list

    data = form.cleaned_data if form.is_valid() else {}
    state = data.get("state") or None
    until = data.get("until")
    qs = lease_list(user=request.user, tenant=request.tenant,  # type: ignore[attr-defined]
                    state=None if state == "live" else state,
                    since=_day_start(data.get("since")),
                    until=_day_start(until + timedelta(days=1)) if until else None)
    if state == "live":
        qs = qs.filter(state__in=LIVE_STATES)
    model = data.get("model")
    if model:
        # The selector's JSON ``contains`` has no SQLite support; match the same rows here.
        qs = qs.filter(Q(gpu_model=model) | Q(gpu_model="", allowed_models__icontains=f'"{model}"'))
    return qs


@tenant_page()
def lease_list(request: HttpRequest) -> HttpResponse:
    form = LeaseFilterForm(request.GET or None)
    page = Paginator(_filtered(request, form), PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(request, "web/leases.html", {
        "form": form, "page": page, "query": query.urlencode(),
    }, status=400 if form.errors else 200)


@tenant_page()
def lease_calendar(request: HttpRequest) -> HttpResponse:
    from portal.leasing.selectors import lease_list

    now = clock.now()
    start = _day_start(timezone.localdate(now))
    offset = request.GET.get("weeks", "0")
    weeks = int(offset) if offset.lstrip("-").isdigit() and abs(int(offset)) < 520 else 0
    start = start + timedelta(weeks=weeks)
    end = start + timedelta(days=CALENDAR_DAYS)
    leases = (lease_list(user=request.user, tenant=request.tenant,  # type: ignore[attr-defined]
                         since=start, until=end)
              .exclude(state__in=sorted(states.NEVER_RAN))
              .order_by("start_at")[:200])
    span = (end - start).total_seconds()
    rows = []
    for lease in leases:
        begin, finish = _calendar_span(lease, now)
        a, b = max(begin, start), min(finish, end)
        rows.append({"lease": lease, "begin": begin, "finish": finish,
                     "left": round(100 * (a - start).total_seconds() / span, 2),
                     "width": max(0.8, round(100 * (b - a).total_seconds() / span, 2))})
    days = [start + timedelta(days=i) for i in range(CALENDAR_DAYS)]
    now_pct = round(100 * (now - start).total_seconds() / span, 2) if start <= now < end else None
    return render(request, "web/calendar.html", {
        "rows": rows, "days": days, "start": start, "end": end, "weeks": weeks,
        "now_pct": now_pct,
    })


def _calendar_span(lease: Any, now: datetime) -> tuple[datetime, datetime]:
    """Where a lease sits on the calendar: a waiting order (ordered "as soon as possible")
    from its earliest start, else from now, for its duration — not from its order time."""
    if lease.active_at is None and lease.state in states.WAITING \
            and waits.is_asap(lease):
        begin = max(lease.earliest_start or now, now)
        return begin, begin + (lease.end_at - lease.start_at)
    return lease.active_at or lease.start_at, lease.ended_at or lease.end_at


def _lease(request: HttpRequest, lease_id: Any) -> Any:
    from portal.leasing.selectors import lease_get

    return lease_get(user=request.user, lease_id=lease_id)


def chart_labels() -> dict[str, str]:
    return {"util": _("Utilisation"), "mem": _("Memory"), "temp": _("Temperature"),
            "power": _("Power"), "tx": _("Transmit"), "rx": _("Receive"), "errors": _("Errors"),
            "connected": _("Live"), "disconnected": _("Not connected")}


@tenant_page()
def lease_detail(request: HttpRequest, lease_id: Any) -> HttpResponse:
    from portal.leasing.selectors import (
        cuda_visible_devices,
        lease_connection,
        lease_events,
        lease_faults,
        mig_devices,
        queue_position,
    )

    lease = _lease(request, lease_id)
    holding = lease.state in states.HOLDING
    gpus = live.lease_gpus(lease) if holding else []
    telemetry = live.lease_telemetry(lease, gpus) if holding else {"gpus": [], "ports": []}
    # What the charts draw as soon as the page opens (the socket then appends live samples).
    charts = ({"type": "telemetry", **telemetry,
               "history": live.lease_history(lease, gpus, telemetry)} if holding else None)
    # A running spot lease under a preemption notice (lifecycle.preemption).
    preempting = lease.state == LeaseState.NOTICE
    from portal.billing.statements import lease_money

    events = list(lease_events(lease=lease))
    devices = mig_devices(lease) if lease.mig_profile else []
    return render(request, "web/lease.html", {
        "mig_devices": devices, "cuda_visible_devices": cuda_visible_devices(devices),
        "mig_pending_reset": waits.mig_pending_reset(devices),
        "lease": lease, "money": lease_money(lease),
        "queue_position": queue_position(lease=lease),
        "events": events,
        "conn": lease_connection(lease=lease) if holding else None,
        "telemetry": telemetry,
        "problems": live.node_problems(gpus) + live.problems(telemetry),
        "may_act": can(request, Role.MEMBER),
        "may_cancel": lease.state in states.CANCELLABLE,
        "may_release": lease.state in states.RELEASABLE,
        "may_extend": lease.state in states.EXTENDABLE,
        "preempting": preempting,
        # failed hardware: read only for a lease whose timeline has a fault (no query else)
        "faults": list(lease_faults(lease=lease)) if any(
            e.kind == "fault" for e in events) else [],
        "live": lease.state in LIVE_STATES,
        "chart_labels": chart_labels(),
        "charts": charts,
    })


def _extend_terms(lease: Any) -> dict[str, Any]:
    """What the extend page states up front: the cost of an extra hour and the latest end
    the limits allow (the calendar may allow less: said after a refusal)."""
    from portal.billing.statements import lease_money
    from portal.leasing.limits import MAX_DURATION_HOURS
    from portal.leasing.quotas import quota_for

    quota = quota_for(lease.tenant, lease.gpu_model) if lease.gpu_model else None
    hours = min(MAX_DURATION_HOURS, quota.max_lease_hours if quota else MAX_DURATION_HOURS)
    return {"money": lease_money(lease), "max_hours": hours,
            "latest_end": lease.start_at + timedelta(hours=hours)}


def _added_cost(lease: Any, old_end: datetime) -> str:
    from portal.billing.pricing import estimate
    from portal.billing.statements import lease_money

    money = lease_money(lease)
    if money is None:
        return ""
    amount, currency = estimate(tenant=lease.tenant, gpu_model=lease.gpu_model or
                                next(iter(lease.allowed_models or []), ""),
                                priority=lease.priority, gpus=money["gpus"], start=old_end,
                                end=lease.end_at, mig_profile=lease.mig_profile)
    return _("%(amount)s %(currency)s added.") % {"amount": f"{amount:,.2f}",
                                                 "currency": currency}


@tenant_page(Role.MEMBER)
def lease_extend(request: HttpRequest, lease_id: Any) -> HttpResponse:
    from portal.leasing.services import lease_extend as extend

    lease = _lease(request, lease_id)
    initial = {"end_at": timezone.localtime(lease.end_at + timedelta(hours=4))}
    form = ExtendForm(request.POST or None, initial=initial)
    longest = None
    if request.method == "POST" and form.is_valid():
        old_end = lease.end_at
        try:
            lease = extend(actor=request.user, lease=lease, end_at=form.cleaned_data["end_at"])
        except ApplicationError as exc:
            apply_errors(form, exc)
            longest = getattr(exc, "longest_end", None)
        else:
            messages.success(request, " ".join(filter(None, [
                _("Lease extended."), _added_cost(lease, old_end)])))
            return redirect("web:lease", lease_id=lease.pk)
    return render(request, "web/lease_extend.html", {
        "lease": lease, "form": form, "longest": longest, **_extend_terms(lease),
    }, status=400 if form.errors else 200)


def _confirm_action(request: HttpRequest, lease_id: Any, action: str) -> HttpResponse:
    from portal.leasing import services

    lease = _lease(request, lease_id)
    form = ReasonForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        func = services.lease_cancel if action == "cancel" else services.lease_release
        try:
            func(actor=request.user, lease=lease, reason=form.cleaned_data["reason"])
        except ApplicationError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, _("Lease cancelled.") if action == "cancel"
                             else _("Lease is being released."))
            return redirect("web:lease", lease_id=lease.pk)
    return render(request, "web/lease_confirm.html", {
        "lease": lease, "form": form, "action": action,
    }, status=400 if form.errors else 200)


@tenant_page(Role.MEMBER)
def lease_cancel(request: HttpRequest, lease_id: Any) -> HttpResponse:
    return _confirm_action(request, lease_id, "cancel")


@tenant_page(Role.MEMBER)
def lease_release(request: HttpRequest, lease_id: Any) -> HttpResponse:
    return _confirm_action(request, lease_id, "release")


@tenant_page(Role.MEMBER)
def lease_degraded(request: HttpRequest, lease_id: Any) -> HttpResponse:
    """A degraded lease's choice (POST): continue smaller, wait, or release."""
    from portal.leasing import services

    lease = _lease(request, lease_id)
    if request.method != "POST":
        return redirect("web:lease", lease_id=lease.pk)
    try:
        services.lease_degraded_choose(actor=request.user, lease=lease,
                                       choice=request.POST.get("choice", ""))
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, _("Your choice is recorded."))
    return redirect("web:lease", lease_id=lease.pk)
