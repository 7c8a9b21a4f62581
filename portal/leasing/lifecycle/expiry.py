"""A lease's end: moved by an extension, reached on time (an ETA task; the reconciler's
``expire_due`` backstops), warned of an hour before."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _

from portal.core import clock
from portal.core.crash import crashpoint
from portal.core.errors import ApplicationError
from portal.leasing import notify, states
from portal.leasing.lifecycle import dispatch, pushing, timing
from portal.leasing.lifecycle.releasing import begin_release
from portal.leasing.models import LOCK_SKIP, Allocation, Lease
from portal.leasing.models import LeaseState as S

RUNNING = sorted(states.RUNNING)


class ExtensionRefused(ApplicationError):
    code = "extension_refused"

    def __init__(self, message: str, longest_end: datetime | None) -> None:
        if longest_end is not None:
            message = _("%(reason)s The longest possible end is %(end)s UTC.") % {
                "reason": message, "end": f"{longest_end:%Y-%m-%d %H:%M}"}
        super().__init__(message, fields={"end_at": [message]})
        self.longest_end = longest_end


def extend(lease: Lease, end_at: datetime) -> None:
    """Move the lease's end (and its slots' end) to ``end_at``; the ETA task follows."""
    try:
        with transaction.atomic():
            Allocation.objects.filter(lease=lease, live=True).update(end_at=end_at)
    except IntegrityError:
        raise ExtensionRefused(_("The GPUs are booked by another lease."), None) from None
    lease.end_at, lease.warned_at = end_at, None
    lease.save(update_fields=["end_at", "warned_at", "updated"])
    notify.lease_changed(lease)
    dispatch.expiry_on_commit(lease.pk, lease.end_at)


def expire_due() -> int:
    """Release every running lease past its end (reconciler; skips locked rows)."""
    now = clock.now()
    with transaction.atomic():
        due = list(Lease.objects.select_for_update(**LOCK_SKIP).select_related("tenant")
                   .filter(state__in=RUNNING, end_at__lte=now))
        for lease in due:
            _expire(lease)
        if due:
            crashpoint("expire.before_commit")
    return len(due)


def _expire(lease: Lease) -> None:
    if lease.state == S.NOTICE:  # its notice ran out (``preemption.give_notice``)
        begin_release(lease, kind=S.PREEMPTED, reason="preemption notice ended")
    else:
        begin_release(lease, kind=S.EXPIRED, reason="reached its end time")


def expire_lease(lease_id: object) -> datetime | None:
    """End one lease if it is due (its ETA task); the end still ahead, if it is not."""
    with transaction.atomic():
        lease = pushing.lock(lease_id)
        if lease is None or lease.state not in states.RUNNING:
            return None
        if lease.end_at > clock.now():
            return lease.end_at
        _expire(lease)
        crashpoint("expire.before_commit")
    return None


def warn_expiring(minutes: int = 60) -> int:
    """Tell the users of active leases ending within ``minutes`` (once per end); a lease
    under a preemption notice was told already."""
    now = clock.now()
    with transaction.atomic():
        due = list(Lease.objects.select_for_update(**LOCK_SKIP).select_related("tenant")
                   .filter(state=S.ACTIVE, warned_at__isnull=True,
                           end_at__lte=now + timedelta(minutes=minutes), end_at__gt=now))
        for lease in due:
            lease.warned_at = now
            lease.save(update_fields=["warned_at", "updated"])
            states.record(lease, "expiry_warning", reason=f"ends within {minutes} minutes")
            notify.expiring(lease, minutes)
    return len(due)


def schedule_near_expiries() -> int:
    """Beat: ETA tasks for the running leases that end within the horizon."""
    due = Lease.objects.filter(state__in=RUNNING,
                               end_at__lte=clock.now() + timing.expiry_horizon()).values_list(
        "pk", "end_at")
    for lease_id, end_at in due:
        dispatch.expiry(lease_id, end_at)
    return len(due)
