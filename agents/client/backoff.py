"""Exponential backoff with full jitter (AWS architecture blog's "full jitter"), and the
client's hold-off after an answer that asks it to wait (``Retry-After``) or refuses it."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

MAX_RETRY_AFTER_S = 3600.0
PENDING_RETRY_S = 60.0


class Backoff:
    def __init__(self, base_s: float = 1.0, cap_s: float = 60.0,
                 rng: random.Random | None = None) -> None:  # fmt: skip
        self.base_s, self.cap_s = base_s, cap_s
        self.rng = rng or random.Random()
        self.attempt = 0

    def next_delay(self) -> float:
        ceiling = min(self.cap_s, self.base_s * (2**self.attempt))
        self.attempt = min(self.attempt + 1, 30)
        return self.rng.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.attempt = 0


class HoldOff:
    """Until when the client must not call the portal, from its last error answer:

    - a ``Retry-After`` (429 ``rate_limited``, 503, 409 ``pending_approval``): that long
      (at most an hour; ``pending_approval`` without one: a minute);
    - another 4xx except 400 (401/403/404 …: the portal refuses the request itself, so a
      retry soon would be refused again): ``refused_base_s`` (5 min), doubling per refusal
      up to ``refused_cap_s`` (6 h) — slow, not forever at the 5xx pace;
    - 400 (that one request was bad; the agent drops a bad report), 408, 5xx or no answer:
      no hold (the agent's own backoff paces retries).

    While held, calls fail at once without touching the network."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 refused_base_s: float = 300.0, refused_cap_s: float = 6 * 3600.0) -> None:
        self.clock = clock
        self.refused_base_s, self.refused_cap_s = refused_base_s, refused_cap_s
        self.until = 0.0
        self.refusals = 0
        self.reason: tuple[int | None, str] = (None, "")

    def remaining(self) -> float:
        return max(0.0, self.until - self.clock())

    def after_error(self, status: int | None, code: str, retry_after: float | None) -> float:
        """Record an error answer; return the hold it sets (seconds, 0 for none)."""
        delay = 0.0
        if retry_after is not None and (status in (429, 503) or code == "pending_approval"):
            delay = min(max(retry_after, 0.0), MAX_RETRY_AFTER_S)
        elif code == "pending_approval":
            delay = PENDING_RETRY_S
        elif status is not None and 400 < status < 500 and status not in (408, 429):
            delay = min(self.refused_cap_s, self.refused_base_s * 2 ** min(self.refusals, 20))
            self.refusals += 1
        if delay > 0:
            self.until = max(self.until, self.clock() + delay)
            self.reason = (status, code)
        return delay

    def ok(self) -> None:
        """A successful answer: no hold, refusals forgotten."""
        self.until, self.refusals = 0.0, 0
