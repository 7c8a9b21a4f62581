"""The node agent's main loop, driven by ``tick(now)`` so that tests can run a simulated
clock (no real sleeping): sample -> spool a report -> flush the spool in order with
backoff -> fetch and apply desired state when the portal says there is a newer one.

After an apply the agent watches for convergence (the subnet manager setting the P_Key,
IPoIB children, grants): it re-reads at short, growing intervals (``converge_step_s``
doubling up to ``converge_max_step_s``, for at most ``converge_watch_s``) and sends a
report the moment the node converges, instead of waiting for the next regular report.
Grants with ``not_after`` are removed by the agent itself when it passes. A critical XID
makes the agent sample and report at once (``xid_news``), as does a finished validation."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agents import __version__, protocol
from agents.client.backoff import Backoff
from agents.client.portal import Credential, PortalClient, PortalError
from agents.client.spool import DiskSpool, atomic_write
from agents.node.apply import NodeApplier
from agents.telemetry import Sampler, to_wire

log = logging.getLogger("agents.node")


@dataclass
class AgentSettings:
    state_dir: Path
    bootstrap_token: str | None = None
    role: str = "node"
    sample_interval_s: float = 10.0
    report_interval_s: float = 10.0
    max_spooled_reports: int = 10_000
    long_poll_s: int = 30
    fsync: bool = True
    converge_step_s: float = 0.05
    converge_max_step_s: float = 0.25
    converge_watch_s: float = 15.0


class NodeAgent:
    def __init__(
        self, settings: AgentSettings, client: PortalClient, sampler: Sampler,
        applier: NodeApplier | Any, clock: Callable[[], float] = time.monotonic,
        backoff: Backoff | None = None, wall: Callable[[], float] = time.time,
    ) -> None:
        self.s, self.client, self.sampler, self.applier = settings, client, sampler, applier
        self.clock, self.wall = clock, wall
        self.backoff = backoff or Backoff()
        self.spool = DiskSpool(settings.state_dir / "spool", settings.max_spooled_reports,
                               fsync=settings.fsync)  # fmt: skip
        self.pending: list[dict[str, Any]] = []
        self.rejected = 0
        self.sent = 0
        self.wake = threading.Event()
        self.news_seq = 0  # the report spooled because something changed (sent urgent)
        now = clock()
        self.next_sample = self.next_report = self.next_send = now
        self.desired_generation = 0
        self._watch_lock = threading.Lock()
        self.watch_until: float | None = None  # watching for convergence until then
        self.next_watch = self.watch_step = 0.0
        self.expiry_at: float | None = None  # wall time of the next grant not_after
        self.on_sample: Callable[[Any], None] | None = None
        if hasattr(applier, "submit"):  # the fabric's: tells when a map is done, at once
            setattr(applier, "on_change", self.wake.set)  # noqa: B010
        self.validator = getattr(applier, "validator", None)
        if self.validator is not None:  # a finished validation is reported at once
            self.validator.on_done = self.wake.set
            self.validator.baseline.load(self._inventory_path)
        self._load_credential()

    # --- enrolment -----------------------------------------------------------------
    @property
    def _cred_path(self) -> Path:
        return self.s.state_dir / "credential.json"

    def _load_credential(self) -> None:
        try:
            data = json.loads(self._cred_path.read_text())
            self.client.credential = Credential(data["node_id"], data["credential"])
        except (OSError, ValueError, KeyError):
            pass

    def _save_credential(self, cred: Credential) -> None:
        self.s.state_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(self._cred_path, json.dumps(cred.__dict__), 0o600)

    @property
    def _inventory_path(self) -> Path:
        return self.s.state_dir / "inventory.json"

    def enrolled(self) -> bool:
        return self.client.credential is not None

    def enrol(self, inventory: dict[str, Any] | None = None) -> None:
        if not self.s.bootstrap_token:
            raise PortalError(None, "no_bootstrap_token", "not enrolled and no bootstrap token")
        sample = self.sampler.sample()
        request: protocol.EnrolRequest = {
            "protocol": protocol.PROTOCOL_VERSION, "bootstrap_token": self.s.bootstrap_token,
            "role": self.s.role, "hostname": sample.host.hostname,
            "agent_version": __version__, "inventory": inventory or _inventory(to_wire(sample)),
        }  # fmt: skip
        cred = self.client.enrol(request)
        self._save_credential(cred)
        atomic_write(self._inventory_path, json.dumps(request["inventory"]), 0o600)
        if self.validator is not None:  # what validation compares a repaired node with
            self.validator.baseline.observe(request["inventory"])
        log.info("enrolled", extra={"node_id": cred.node_id})

    # --- intervals: the portal's, as the fleet grows (§8, ADR 0160) -------------------
    @property
    def report_interval_s(self) -> float:
        """Regular reports: the configured interval, or the portal's when it asks for
        fewer (a large fleet); converged reports never wait for it."""
        return max(self.s.report_interval_s, float(self.client.advice.heartbeat_s or 0))

    @property
    def long_poll_s(self) -> int:
        """The portal's long-poll timeout when it has said one, else the configured."""
        return self.client.advice.long_poll_s or self.s.long_poll_s

    # --- loop ----------------------------------------------------------------------
    def tick(self) -> float:
        """Do whatever is due; return seconds until something is due again."""
        now = self.clock()
        if now >= self.next_sample:  # sample even before enrolment: /metrics works offline
            self._sample()
            self.next_sample = now + self.s.sample_interval_s
        if not self.enrolled():
            if now >= self.next_send:
                try:
                    self.enrol()
                    self.backoff.reset()
                except PortalError as exc:
                    self._failed(now, exc)
            return max(0.0, min(self.next_send, self.next_sample) - now)
        self._expire()
        self._watch(now)
        if now >= self.next_report or self.wake.is_set():
            seq = self._spool_report()
            if self.wake.is_set():  # news (converged, applied, expired): served first
                self.news_seq = seq
            self.next_report = now + self.report_interval_s
        if now >= self.next_send or self.wake.is_set():
            self.wake.clear()
            self.flush(now)
        return max(0.0, min(self._due()) - self.clock())

    def _due(self) -> list[float]:
        due = [self.next_sample, self.next_report, self.next_send]
        if self.watch_until is not None:
            due.append(self.next_watch)
        if self.expiry_at is not None:
            due.append(self.clock() + self.expiry_at - self.wall())
        return due

    # --- convergence and expiry ------------------------------------------------------
    def _start_watch(self) -> None:
        now = self.clock()
        converged = getattr(self.applier, "converged", None)
        with self._watch_lock:  # already converged: the report after the apply says so
            watch = converged is not None and not converged()
            self.watch_until = now + self.s.converge_watch_s if watch else None
            self.watch_step = self.s.converge_step_s
            self.next_watch = now + self.watch_step
        if converged is not None and not watch:
            log.info("converged", extra={"generation": self.applier.generation_applied,
                                         "at_apply": True})
        next_expiry = getattr(self.applier, "next_expiry", None)
        self.expiry_at = next_expiry() if next_expiry is not None else None

    def _watch(self, now: float) -> None:
        converged = getattr(self.applier, "converged", None)
        with self._watch_lock:
            if converged is None or self.watch_until is None or now < self.next_watch:
                return
            if converged():
                log.info("converged", extra={"generation": self.applier.generation_applied})
                self.watch_until = None
                self.wake.set()  # report it now, not at the next regular report
            elif now >= self.watch_until:
                self.watch_until = None  # regular reports carry it from here
            else:
                self.watch_step = min(self.watch_step * 2, self.s.converge_max_step_s)
                self.next_watch = now + self.watch_step

    def _expire(self) -> None:
        if self.expiry_at is None or self.wall() < self.expiry_at:
            return
        if self.applier.expire_grants():
            self.wake.set()
        self.expiry_at = self.applier.next_expiry()

    def xid_news(self) -> None:
        """A critical XID (from the XID watcher's thread): sample and report now, not at
        the next regular sample (the report is urgent: something changed)."""
        self.next_sample = self.clock()
        if self.enrolled():  # before enrolment a wake would only spin the loop
            self.wake.set()

    def _sample(self) -> None:
        sample = self.sampler.sample()
        if self.on_sample is not None:
            self.on_sample(sample)
        observe = getattr(self.applier, "observe_devices", None)
        if observe is not None:
            observe(sample.ib)
        wire = to_wire(sample)
        if self.validator is not None:
            self.validator.baseline.observe(wire)
        self.pending.append(wire)
        del self.pending[: -protocol.MAX_TELEMETRY_PER_REPORT]

    def _spool_report(self) -> int:
        """Spool a report of what is observed now; return its seq."""
        assert self.client.credential is not None
        seq = self.spool.allocate_seq()
        self.spool.push({
            "protocol": protocol.PROTOCOL_VERSION, "node_id": self.client.credential.node_id,
            "seq": seq, "created_at": datetime.fromtimestamp(self.wall(), UTC).isoformat(),
            "agent_version": __version__, "dropped_reports": self.spool.dropped,
            "observed": self.applier.observed(), "telemetry": self.pending,
        })  # fmt: skip
        self.pending = []
        return seq

    def flush(self, now: float) -> None:
        """Send spooled reports oldest first; stop at the first retryable failure."""
        while (report := self.spool.peek()) is not None:
            try:  # only the news is urgent, not a backlog resent after an outage
                ack = self.client.send_report(report, urgent=report["seq"] == self.news_seq)
            except PortalError as exc:
                if exc.status == 400:  # poison: would block the queue forever
                    log.error("report rejected", extra={"seq": report["seq"], "error": str(exc)})
                    self.rejected += 1
                    self.spool.pop(int(report["seq"]))
                    continue
                self._failed(now, exc)
                return
            self.spool.pop(int(report["seq"]))
            self.sent += 1
            self.backoff.reset()
            self.next_send = now + self.report_interval_s
            self._after_ack(ack)

    def _failed(self, now: float, exc: PortalError) -> None:
        delay = self.backoff.next_delay()
        self.next_send = now + delay
        log.warning("portal unreachable" if exc.status is None else "portal error",
                    extra={"error": str(exc), "retry_in_s": round(delay, 2),
                           "spooled": len(self.spool)})  # fmt: skip

    def _after_ack(self, ack: dict[str, Any]) -> None:
        try:
            generation = int(ack.get("desired_generation", 0))
            if generation > max(self.applier.generation_applied, self._in_progress()):
                # also retries a generation whose apply failed (idempotent), once per ack
                self.poll_desired(wait_s=0, after=self.applier.generation_applied)
            if ack.get("rotate_credential"):
                self._save_credential(self.client.rotate_credential())
        except PortalError as exc:  # retried on the next ack / long-poll
            log.warning("follow-up after ack failed", extra={"error": str(exc)})

    def _in_progress(self) -> int:
        """The generation the applier is working on (the fabric's worker), else 0."""
        return int(getattr(self.applier, "generation_in_progress", 0))

    def poll_desired(self, wait_s: int, after: int | None = None) -> bool:
        """Fetch (long-poll) the desired state; apply it if newer. True if applied."""
        since = self.applier.generation_seen if after is None else after
        desired = self.client.desired_state(since, wait_s)
        if desired is None:
            return False
        problems = protocol.validate_desired_state(desired, self.s.role)
        if problems:
            log.error("invalid desired state", extra={"problems": problems[:5]})
            return False
        submit = getattr(self.applier, "submit", None)
        if submit is not None:  # the fabric: applied (newest first) by its own worker
            submit(desired)
        else:
            self.applier.apply(desired)
        log.info("desired state received", extra={"generation": desired["generation"]})
        self._save_desired(desired)
        self._start_watch()
        self.wake.set()  # report the generation reached right away
        return True

    # --- the last desired state, kept across restarts --------------------------------------
    @property
    def _desired_path(self) -> Path:
        return self.s.state_dir / "desired.json"

    def _save_desired(self, desired: dict[str, Any]) -> None:
        self.s.state_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(self._desired_path, json.dumps(desired), 0o600)

    def restore_desired(self) -> bool:
        """Re-apply the last desired state saved before a restart, so that grants still
        end at ``not_after`` if the portal is unreachable from the start. True if one was."""
        try:
            desired = json.loads(self._desired_path.read_text())
        except (OSError, ValueError):
            return False
        if protocol.validate_desired_state(desired, self.s.role):
            return False
        self.applier.apply(desired)
        self._start_watch()
        log.info("desired state restored", extra={"generation": desired["generation"]})
        return True

    def run(self, stop: threading.Event) -> None:
        if self.s.role == "node":  # grants live on nodes; the fabric re-reads its map
            with contextlib.suppress(Exception):  # never a reason not to start
                self.restore_desired()
        worker = getattr(self.applier, "run", None)  # the fabric's coalescing applier
        if worker is not None:
            threading.Thread(target=worker, args=(stop,), daemon=True,
                             name="fabric-apply").start()  # fmt: skip
        waker = threading.Thread(target=self._long_poll, args=(stop,), daemon=True,
                                 name="desired-state-long-poll")  # fmt: skip
        waker.start()
        while not stop.is_set():
            try:
                delay = self.tick()
            except Exception:  # a bug in one step must not stop the agent
                log.exception("tick failed")
                delay = 1.0
            if self.wake.wait(timeout=min(delay, 1.0)):
                continue
        waker.join(timeout=2)

    def _long_poll(self, stop: threading.Event) -> None:
        backoff = Backoff(base_s=1, cap_s=60)
        while not stop.is_set():
            if not self.enrolled():
                stop.wait(1.0)
                continue
            try:
                self.poll_desired(self.long_poll_s)
                backoff.reset()
            except PortalError:
                stop.wait(backoff.next_delay())


def _inventory(t: dict[str, Any]) -> dict[str, Any]:
    gpu_keys = ("index", "uuid", "name", "pci_bus_id", "memory_total_bytes")
    port_keys = ("device", "port", "port_guid", "node_guid", "link_layer", "rate_gbps")
    return {
        "host": t["host"],
        "gpus": [{k: g.get(k) for k in gpu_keys} for g in t["gpus"]],
        "ib_ports": [{k: p.get(k) for k in port_keys} for p in t["ib_ports"]],
    }
