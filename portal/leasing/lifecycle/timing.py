"""How long the lifecycle waits for things (settings, read at call time)."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings

MAX_PROVISION_ATTEMPTS = 2


def _setting(name: str, default: float) -> float:
    return float(getattr(settings, name, default))


def provision_timeout() -> timedelta:
    return timedelta(seconds=_setting("GPUPOOL_PROVISION_TIMEOUT_S", 120))


def release_timeout() -> timedelta:
    return timedelta(seconds=_setting("GPUPOOL_RELEASE_TIMEOUT_S", 300))


def preempt_grace() -> timedelta:
    """How long a running spot lease is warned before it is preempted (0: at once)."""
    return timedelta(seconds=_setting("GPUPOOL_PREEMPT_GRACE_S", 120))


def expiry_horizon() -> timedelta:
    """ETA tasks are only sent this far ahead: below the broker's visibility timeout, so a
    waiting task is not redelivered; the beat sends the later ones as their end nears."""
    return timedelta(seconds=_setting("GPUPOOL_EXPIRY_ETA_HORIZON_S", 1800))
