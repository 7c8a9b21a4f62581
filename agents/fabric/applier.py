"""Applies the partition map through a FabricManager, verifies, and reports drift.

Verification re-reads the fabric at short, growing intervals (``verify_step_s`` doubling
up to ``verify_max_step_s``, for at most ``verify_timeout_s``), like the node agent's
convergence watch: the SM usually programs the ports within a sweep (tenths of a second),
and every step waited past that is latency on the way to ACTIVE and to ENDED."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from agents.fabric.base import FabricManager, PartitionMap, drift, index0_drift, member_guids

log = logging.getLogger("agents.fabric")


class FabricApplier:
    def __init__(self, manager: FabricManager, verify_timeout_s: float = 30.0,
                 sleep: Callable[[float], None] = time.sleep,
                 verify_step_s: float = 0.05, verify_max_step_s: float = 0.5) -> None:  # fmt: skip
        self.manager, self.verify_timeout_s, self.sleep = manager, verify_timeout_s, sleep
        self.verify_step_s, self.verify_max_step_s = verify_step_s, verify_max_step_s
        self._lock = threading.RLock()
        self.generation_applied = 0
        self.generation_seen = 0
        self.pmap = PartitionMap(0)
        self.errors: list[dict[str, str]] = []
        self.drift: list[dict[str, str]] = []
        self._guids: set[str] = set()
        self._keys: set[int] = set()  # keys that were or are ours: the only ones verified

    def apply(self, desired: dict[str, Any]) -> None:
        with self._lock:  # long-poll thread applies while the loop reports
            self._apply(desired)

    def _apply(self, desired: dict[str, Any]) -> None:
        generation = int(desired["generation"])
        self.generation_seen = max(self.generation_seen, generation)
        if generation < self.generation_applied:
            return
        self.errors = []
        try:
            pmap = PartitionMap.from_wire(desired)
            # members the fabric holds under our management, read from the fabric (not
            # remembered): after a restart the stale ones are removed and verified too
            managed = self.manager.managed()
            self._guids |= member_guids(managed)
            self._keys |= set(managed)
            self.manager.apply(pmap)
        except Exception as exc:  # the report carries it; the loop continues
            log.error("partition apply failed", extra={"error": str(exc)})
            self.errors.append({"item": "partitions", "message": f"{type(exc).__name__}: {exc}"})
            return
        # GUIDs that were or are members: removal must be verified too
        self._guids |= {g for p in pmap.partitions for g, _ in p.members}
        self._keys |= {p.pkey for p in pmap.partitions}
        self.pmap = pmap
        self.verify()
        self.generation_applied = generation

    def verify(self) -> list[dict[str, str]]:
        deadline = time.monotonic() + self.verify_timeout_s
        step = self.verify_step_s
        while True:
            try:
                actual = self.manager.read_back(self._guids)
                # keys an operator manages outside the project's block/range are theirs
                ours = {k: v for k, v in actual.items() if k in self._keys}
                self.drift = drift(self.pmap.expected(), ours, self._guids)
                want0 = self.pmap.index0()
                if want0 and not self.drift:
                    self.drift = index0_drift(want0, self.manager.read_index0(set(want0)))
            except Exception as exc:
                self.drift = [{"pkey": "*", "guid": "*", "expected": "readable",
                               "actual": f"{type(exc).__name__}: {exc}"}]  # fmt: skip
            if not self.drift or time.monotonic() >= deadline:
                return self.drift
            self.sleep(step)
            step = min(step * 2, self.verify_max_step_s)

    def observed(self) -> dict[str, Any]:
        with self._lock:
            return self._observed()

    def _observed(self) -> dict[str, Any]:
        return {
            "generation_applied": self.generation_applied,
            "generation_seen": self.generation_seen,
            "apply_errors": list(self.errors),
            "manager": self.manager.name,
            "drift": list(self.drift),
        }
