"""The one home of the order limits every order meets before any quota (issue 13).

The API serializer, the order form, the quote, the order service and the console's quota
form all read these, so that they cannot disagree. A tenant's quota may be stricter
(``Quota.max_lease_hours``), never looser than ``MAX_DURATION_HOURS``.

The booking horizon (how far ahead a start may be) is a setting,
``ORDER_BOOKING_HORIZON_DAYS`` (default 90). A start past it, or an end more than
``MAX_DURATION_HOURS`` after the start, is a field error — which also keeps every date
arithmetic far away from ``datetime.max`` (9999-12-31 was an ``OverflowError``, a 500).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.utils.translation import gettext as _

from portal.core.errors import ApplicationError

MAX_GPUS_PER_NODE = 16
MAX_MIG_INSTANCES_PER_NODE = MAX_GPUS_PER_NODE * 7  # a MIG order counts instances (ADR 0222)
MAX_NODES = 512
MAX_DURATION_HOURS = 24 * 90
DEFAULT_BOOKING_HORIZON_DAYS = 90


def booking_horizon() -> timedelta:
    days = getattr(settings, "ORDER_BOOKING_HORIZON_DAYS", DEFAULT_BOOKING_HORIZON_DAYS)
    return timedelta(days=int(days))


def latest_start(now: datetime) -> datetime:
    return now + booking_horizon()


def _refuse(field: str, message: str) -> ApplicationError:
    return ApplicationError(message, fields={field: [message]})


def check_start(start: datetime, now: datetime) -> None:
    """A start at most the booking horizon ahead of ``now``."""
    if start > latest_start(now):
        raise _refuse("start_at", _("The start is at most %(days)s days ahead (until "
                                    "%(latest)s UTC).")
                      % {"days": booking_horizon().days,
                         "latest": f"{latest_start(now):%Y-%m-%d %H:%M}"})


def duration_error(field: str) -> ApplicationError:
    return _refuse(field, _("A lease lasts at most %(hours)s hours (%(days)s days).")
                   % {"hours": MAX_DURATION_HOURS, "days": MAX_DURATION_HOURS // 24})


def check_end(start: datetime, end: datetime, field: str = "end_at") -> None:
    """An end at most ``MAX_DURATION_HOURS`` after the start (compared without adding to
    ``end``, so no date near ``datetime.max`` can overflow)."""
    if end - start > timedelta(hours=MAX_DURATION_HOURS):
        raise duration_error(field)
