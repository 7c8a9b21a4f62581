"""Exponential backoff with full jitter (AWS architecture blog's "full jitter")."""

from __future__ import annotations

import random


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
