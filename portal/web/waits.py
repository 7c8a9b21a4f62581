"""Why a lease (or a quote) waits, in words with numbers (issue 13, finding 6).

The scheduler answers with a stable reason code and an earliest start
(``scheduler.decisions.Reason``, stored as ``Lease.wait_reason`` / ``earliest_start``);
pages show a translated sentence instead of the code.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.utils import timezone
from django.utils.translation import gettext as _

from portal.leasing.models import LeaseState
from portal.leasing.states import WAITING

ASAP_GRACE = timedelta(minutes=5)  # an order whose start is its order time: "as soon as possible"


def _when(at: datetime | None) -> str:
    return f"{timezone.localtime(at, timezone.get_fixed_timezone(0)):%Y-%m-%d %H:%M} UTC" \
        if at else ""


def _gpus(value: Any) -> str:
    return f"{Decimal(str(value)).normalize():f}"


def sentence(reason: str | None, *, gpus: Any, models: str, earliest: datetime | None,
             locality: str = "") -> str:
    """One sentence for a wait reason code; '' for none. Unknown codes are shown as is."""
    if not reason:
        return ""
    n = {"gpus": _gpus(gpus), "models": models, "earliest": _when(earliest),
         "locality": locality or _("the required locality")}
    texts = {
        "no_matching_gpus": _("No node of the pool can ever hold %(gpus)s GPUs of %(models)s "
                              "in this shape; order fewer GPUs per node or another model."),
        "insufficient_capacity": _("Not enough free %(models)s GPUs for %(gpus)s GPUs right "
                                   "now; it starts when running leases end."),
        "fragmentation": _("There are enough free %(models)s GPUs in total, but not %(gpus)s "
                           "together; it starts when leases end."),
        "quota": _("Your tenant's quota has no room for %(gpus)s more %(models)s GPUs now; it "
                   "starts when your own leases end."),
        "budget": _("Your tenant's monthly GPU-hour budget for %(models)s is used up."),
        "priority": _("The free %(models)s GPUs go to orders ahead of this one in the queue."),
        "topology": _("%(gpus)s GPUs of %(models)s are free, but not within %(locality)s as "
                      "required; it starts when such a group is free."),
        "reserved": _("The %(models)s GPUs are held by a reservation starting soon."),
        "not_yet": _("Reserved for its start; the GPUs are booked."),
        "mig_none": _("No %(models)s GPU of the pool is offered for MIG instances right now "
                      "(all are whole-GPU only, busy whole or out of service)."),
        "mig_full": _("Every %(models)s GPU offered for MIG is full: no free slices at a valid "
                      "placement for this profile; it starts when instances are released."),
    }
    text = texts.get(reason)
    if text is None:
        return reason
    text = text % n
    if earliest and reason != "not_yet":
        text += " " + _("Earliest start: %(earliest)s.") % n
    return text


def mig_pending_reset(devices: list[dict[str, Any]]) -> str:
    """Why a MIG lease's instances are not made yet when their GPU waits for a reset to
    change its MIG mode ('' when none does)."""
    gpus = sorted({(d["node"], d["gpu_index"]) for d in devices if d.get("pending_reset")})
    if not gpus:
        return ""
    where = ", ".join(_("GPU %(index)s of %(node)s") % {"index": i, "node": n}
                      for n, i in gpus)
    return _("Pending GPU reset: the MIG mode of %(where)s changes only after the GPU is "
             "reset (processes still ran on it when MIG was switched on); the instances are "
             "made then.") % {"where": where}


def lease_wait(lease: Any) -> str:
    from portal.web import labels

    if lease.state not in WAITING:
        return ""
    return sentence(lease.wait_reason, gpus=lease.total_gpus,
                    models=lease.gpu_model or " / ".join(lease.allowed_models or []),
                    earliest=lease.earliest_start,
                    locality=str(labels.LOCALITIES.get(lease.locality, lease.locality)).lower())


def quote_wait(quote: Any) -> str:
    """The sentence for a quote that cannot start when asked ('' when it can)."""
    if quote.placeable_now:
        return ""
    return sentence(quote.reason, gpus=quote.gpus, models=quote.model or "",
                    earliest=quote.earliest_start)


def is_asap(lease: Any) -> bool:
    """Ordered to start as soon as possible (its start is its order time), not booked."""
    return bool(lease.start_at <= lease.created + ASAP_GRACE)


def shown_state(lease: Any) -> str:
    """The state a page shows: an accepted future reservation reads "scheduled"."""
    if lease.state == LeaseState.QUEUED and lease.wait_reason == "not_yet":
        return LeaseState.SCHEDULED
    return str(lease.state)


def shown_start(lease: Any) -> datetime | None:
    """The start a page shows: when it started; a booking's start; else the earliest start
    the scheduler knows (``None``: not known yet) — never the order time of a waiting one."""
    if lease.active_at:
        return lease.active_at  # type: ignore[no-any-return]
    if lease.state in WAITING and is_asap(lease):
        return lease.earliest_start  # type: ignore[no-any-return]
    return lease.start_at  # type: ignore[no-any-return]


def shown_end(lease: Any) -> datetime | None:
    """The end a page shows: when it ended; for a waiting order that starts as soon as
    possible, its earliest start plus its duration (``None``: not known yet) — never the
    nominal end counted from the order time, which can read earlier than its start."""
    if lease.ended_at:
        return lease.ended_at  # type: ignore[no-any-return]
    if lease.state in WAITING and is_asap(lease):
        if lease.earliest_start is None:
            return None
        return lease.earliest_start + (lease.end_at - lease.start_at)  # type: ignore[no-any-return]
    return lease.end_at  # type: ignore[no-any-return]
