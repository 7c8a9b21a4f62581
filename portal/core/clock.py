"""The portal's clock. Services ask it for the time, so tests can move time, not sleep."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

_offset = timedelta(0)
_frozen: datetime | None = None


def now() -> datetime:
    if _frozen is not None:
        return _frozen
    return timezone.now() + _offset


def freeze(at: datetime) -> None:
    global _frozen
    _frozen = at


def advance(delta: timedelta) -> None:
    """Move the (frozen or running) clock forward."""
    global _frozen, _offset
    if _frozen is not None:
        _frozen += delta
    else:
        _offset += delta


def reset() -> None:
    global _frozen, _offset
    _frozen, _offset = None, timedelta(0)


def epoch(at: datetime) -> int:
    return int(at.timestamp())


def timedelta_s(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)
