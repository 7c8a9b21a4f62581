"""Applies the partition map through a FabricManager, verifies, and reports drift.

Verification re-reads the fabric at short, growing intervals (``verify_step_s`` doubling
up to ``verify_max_step_s``, for at most ``verify_timeout_s``), like the node agent's
convergence watch: the SM usually programs the ports within a sweep (tenths of a second),
and every step waited past that is latency on the way to ACTIVE and to ENDED.

Desired maps are **coalesced** (ADR 0135). The agent hands each one over with ``submit``
and does not wait; one worker thread (``run``) applies the newest map it holds. A map
that arrives while another is being applied or verified supersedes it: the worker stops
verifying the old one at once (a read-back round in flight is abandoned, not waited for)
and applies the newest, so three maps arriving during one apply cost one more apply, not
three. Every map is the whole desired state, so the newest covers the ones it skipped;
``generation_applied`` only ever names a map that was applied and verified (or whose
verification timed out, with its drift reported). ``on_change`` is called the moment a
map is done, so the agent reports convergence at once, not at its next regular report.
``observed()`` never waits for the fabric: reports go out while a verification runs."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from agents.fabric.base import (
    FabricManager,
    Membership,
    PartitionMap,
    drift,
    index0_drift,
    member_guids,
)

log = logging.getLogger("agents.fabric")
Drift = list[dict[str, str]]
_ROUND_POLL_S = 0.02  # how often a worker waiting on a read-back round looks for a newer map


@dataclass(frozen=True)
class _Target:
    """What one verification compares the fabric with (frozen: a round abandoned in a
    thread of its own never sees a later map)."""

    pmap: PartitionMap
    guids: frozenset[str]
    keys: frozenset[int]


class FabricApplier:
    def __init__(self, manager: FabricManager, verify_timeout_s: float = 30.0,
                 sleep: Callable[[float], None] | None = None,
                 verify_step_s: float = 0.05, verify_max_step_s: float = 0.5,
                 on_change: Callable[[], None] | None = None) -> None:  # fmt: skip
        self.manager, self.verify_timeout_s = manager, verify_timeout_s
        self.sleep = sleep or self._pause  # the default wakes early for a newer map
        self.verify_step_s, self.verify_max_step_s = verify_step_s, verify_max_step_s
        self.on_change = on_change
        self._state = threading.Lock()  # the fields below; never held over fabric I/O
        self._work = threading.Lock()  # one apply + verification at a time
        self._kick = threading.Event()  # a map was submitted (or the worker must stop)
        self._stop = threading.Event()
        self._pending: dict[str, Any] | None = None
        self._in_flight = 0  # generation being applied or verified now
        self._reader: ThreadPoolExecutor | None = None  # worker mode: rounds run here
        self.generation_applied = 0
        self.generation_seen = 0
        self.applies = 0  # manager.apply calls: coalescing shows here
        self.pmap = PartitionMap(0)
        self.errors: Drift = []
        self.drift: Drift = []
        self._guids: set[str] = set()
        self._keys: set[int] = set()  # keys that were or are ours: the only ones verified

    # --- handing maps over ------------------------------------------------------------------
    def submit(self, desired: dict[str, Any]) -> bool:
        """Take a desired map without waiting for the fabric; the newest one held wins.
        False if it is not newer than what is pending or being applied (or stale)."""
        generation = int(desired["generation"])
        with self._state:
            self.generation_seen = max(self.generation_seen, generation)
            held = max(self._in_flight, _generation(self._pending))
            if generation <= held or generation < self.generation_applied:
                return False
            if self._pending is not None:
                log.info("desired map superseded before apply", extra={
                    "generation": _generation(self._pending), "by": generation})
            self._pending = desired
        self._kick.set()
        return True

    @property
    def generation_in_progress(self) -> int:
        """The newest generation pending or being applied (0 when idle)."""
        with self._state:
            return max(self._in_flight, _generation(self._pending))

    def apply(self, desired: dict[str, Any]) -> None:
        """Apply and verify one map in the caller's thread (tests, one-shot use)."""
        with self._state:
            self.generation_seen = max(self.generation_seen, int(desired["generation"]))
        with self._work:
            self._process(desired)

    # --- the worker -------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Apply submitted maps, newest first, until ``stop`` is set."""
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="fabric-read-back")
        watcher = threading.Thread(target=self._stop_on, args=(stop,), daemon=True)
        watcher.start()
        try:
            while not self._stop.is_set():
                self._kick.wait(1.0)
                self._kick.clear()
                desired = self._take()
                if desired is not None:
                    with self._work:
                        self._process(desired)
        finally:
            self._reader.shutdown(wait=False, cancel_futures=True)
            self._reader = None

    def _stop_on(self, stop: threading.Event) -> None:
        stop.wait()
        self._stop.set()
        self._kick.set()

    def _take(self) -> dict[str, Any] | None:
        with self._state:
            desired, self._pending = self._pending, None
            self._in_flight = _generation(desired)
            return desired

    def _superseded(self) -> bool:
        with self._state:
            return self._pending is not None or self._stop.is_set()

    def _pause(self, seconds: float) -> None:
        self._kick.wait(seconds)  # returns early when a newer map (or stop) arrives

    # --- one map ------------------------------------------------------------------------------
    def _process(self, desired: dict[str, Any]) -> None:
        generation = int(desired["generation"])
        try:
            if generation < self.generation_applied:
                return
            target = self._apply(desired)
            if target is None:
                return
            found = self._verify(target)
            if found is None:
                log.info("verification superseded by a newer map",
                         extra={"generation": generation})
                return
            with self._state:
                self.drift, self.generation_applied = found, generation
            log.info("partition map applied", extra={"generation": generation,
                                                     "drift": len(found)})  # fmt: skip
        finally:
            with self._state:
                self._in_flight = 0
        self._changed()

    def _apply(self, desired: dict[str, Any]) -> _Target | None:
        try:
            pmap = PartitionMap.from_wire(desired)
            # members the fabric holds under our management, read from the fabric (not
            # remembered): after a restart the stale ones are removed and verified too
            managed = self.manager.managed()
            self.manager.apply(pmap)
            self.applies += 1
        except Exception as exc:  # the report carries it; the loop continues
            log.error("partition apply failed", extra={"error": str(exc)})
            with self._state:
                self.errors = [{"item": "partitions",
                                "message": f"{type(exc).__name__}: {exc}"}]  # fmt: skip
            return None
        with self._state:
            self.errors = []
            # GUIDs that were or are members: removal must be verified too
            self._guids |= member_guids(managed) | {g for p in pmap.partitions
                                                    for g, _ in p.members}
            self._keys |= set(managed) | {p.pkey for p in pmap.partitions}
            self.pmap = pmap
            return _Target(pmap, frozenset(self._guids), frozenset(self._keys))

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    # --- verification -------------------------------------------------------------------------
    def verify(self) -> Drift:
        """Verify the map in force now (in the caller's thread); returns the drift."""
        with self._state:
            target = _Target(self.pmap, frozenset(self._guids), frozenset(self._keys))
        found = self._verify(target)
        with self._state:
            self.drift = found if found is not None else self.drift
            return list(self.drift)

    def _verify(self, target: _Target) -> Drift | None:
        """Re-read until the fabric matches ``target`` or the timeout; None if a newer map
        arrived meanwhile (its apply must not wait for this one)."""
        deadline = time.monotonic() + self.verify_timeout_s
        step = self.verify_step_s
        while True:
            found = self._round(target)
            if found is None or not found or time.monotonic() >= deadline:
                return found
            with self._state:
                self.drift = found  # a report sent meanwhile shows what is still missing
            self.sleep(step)
            if self._superseded():
                return None
            step = min(step * 2, self.verify_max_step_s)

    def _round(self, target: _Target) -> Drift | None:
        if self._reader is None:  # synchronous use: read in this thread
            return self._read(target)
        future: Future[Drift] = self._reader.submit(self._read, target)
        while True:
            try:
                return future.result(timeout=_ROUND_POLL_S)
            except FutureTimeout:
                if self._superseded():
                    return None  # the round finishes on its own; its answer is dropped

    def _read(self, target: _Target) -> Drift:
        try:
            actual = self.manager.read_back(set(target.guids))
            # keys an operator manages outside the project's block/range are theirs
            ours: dict[int, Membership] = {k: v for k, v in actual.items()
                                           if k in target.keys}  # fmt: skip
            found = drift(target.pmap.expected(), ours, set(target.guids))
            want0 = target.pmap.index0()
            if want0 and not found:
                found = index0_drift(want0, self.manager.read_index0(set(want0)))
            return found
        except Exception as exc:
            return [{"pkey": "*", "guid": "*", "expected": "readable",
                     "actual": f"{type(exc).__name__}: {exc}"}]  # fmt: skip

    # --- reporting ----------------------------------------------------------------------------
    def observed(self) -> dict[str, Any]:
        with self._state:  # never waits for an apply or a read-back
            return {
                "generation_applied": self.generation_applied,
                "generation_seen": self.generation_seen,
                "apply_errors": list(self.errors),
                "manager": self.manager.name,
                "drift": list(self.drift),
            }


def _generation(desired: dict[str, Any] | None) -> int:
    return int(desired["generation"]) if desired is not None else 0
