"""The validation run the portal asks of a node before repaired hardware goes back into
service (desired ``validation``, observed ``validation``, docs/agent-protocol.md §5.2).

The checks read one fresh telemetry item in the production shape (``to_wire``), so the
simulated fleet (``agents.sim.node``) runs exactly these checks on what it reports. Then
``dcgmi diag`` (``agents.node.dcgm``). A run happens in its own thread, once per new
validation id; its result stays in observed state until a new id arrives, and the agent
reports the moment it finishes (``on_done``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.node.dcgm import DcgmRunner
from agents.nvml import binding

log = logging.getLogger("agents.node.validate")

DETAIL_MAX = 512
PORT_ACTIVE, PHYS_LINK_UP = 4, 5
Check = dict[str, Any]


def check(name: str, ok: bool, detail: str = "", skipped: bool = False,
          **where: Any) -> Check:  # fmt: skip
    out: Check = {"name": name, "ok": ok, "detail": detail[:DETAIL_MAX]}
    out.update({k: v for k, v in where.items() if v is not None})
    if skipped:
        out["skipped"] = True
    return out


@dataclass
class Baseline:
    """What the node had when it was whole: the GPU count and each port's rate, the
    highest seen (the enrolment inventory, then every sample)."""

    gpu_count: int | None = None
    port_rates: dict[str, float] = field(default_factory=dict)  # "mlx5_0/1" -> Gb/s

    def observe(self, doc: dict[str, Any]) -> None:
        """Take an enrolment inventory or a telemetry item (same ``gpus``/``ib_ports``)."""
        gpus = doc.get("gpus") or []
        if gpus:
            self.gpu_count = max(self.gpu_count or 0, len(gpus))
        for port in doc.get("ib_ports") or []:
            rate = port.get("rate_gbps")
            if isinstance(rate, int | float) and not isinstance(rate, bool):
                key = f"{port.get('device')}/{port.get('port')}"
                self.port_rates[key] = max(self.port_rates.get(key, 0.0), float(rate))

    def load(self, path: Path) -> None:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            self.observe(json.loads(path.read_text()))


def _value(gpu: dict[str, Any], key: str, name: str, i: Any) -> tuple[Any, Check | None]:
    value = gpu.get(key)
    if value is None:
        return None, check(name, True, "not supported on this GPU", skipped=True, gpu_index=i)
    return value, None


def gpu_checks(gpu: dict[str, Any]) -> list[Check]:
    i = gpu.get("index")
    if gpu.get("lost"):
        return [check("gpu_lost", False, "GPU is lost (fallen off the bus)", gpu_index=i)]
    out = [check("gpu_lost", True, gpu_index=i),
           check("gpu_healthy", bool(gpu.get("healthy")),
                 ", ".join(gpu.get("unhealthy_reasons") or []), gpu_index=i)]
    rules: list[tuple[str, str, Callable[[Any], bool], str]] = [
        ("ecc_uncorrected", "ecc_uncorrected_volatile", lambda v: v == 0,
         "volatile uncorrected ECC errors: {}"),
        ("remap_pending", "remapped_rows_pending", lambda v: not v, "row remap pending: {}"),
        ("remap_failure", "remapped_rows_failure", lambda v: not v, "row remap failure: {}"),
        ("clocks_event_reasons", "clocks_event_reasons",
         lambda v: not v & binding.HW_CLOCKS_EVENTS, "clocks event reasons {:#x}"),
        ("recovery_action", "recovery_action", lambda v: v == 0, "recovery action {}"),
        ("sm_clock", "sm_clock_mhz", lambda v: v > 0, "SM clock {} MHz"),
    ]  # fmt: skip
    for name, key, good, text in rules:
        value, skipped = _value(gpu, key, name, i)
        out.append(skipped or check(name, bool(good(value)), text.format(value), gpu_index=i))
    out.append(_power(gpu, i))
    return out


def _power(gpu: dict[str, Any], i: Any) -> Check:
    draw, limit = gpu.get("power_w"), gpu.get("power_limit_w")
    if draw is None or limit is None:
        return check("power", True, "power draw or limit not supported", skipped=True,
                     gpu_index=i)
    return check("power", draw <= limit, f"{draw:g} W of {limit:g} W enforced", gpu_index=i)


def port_checks(port: dict[str, Any], baseline: Baseline) -> list[Check]:
    where: dict[str, Any] = {"device": port.get("device"), "port": port.get("port")}
    state, phys, rate = port.get("state_id"), port.get("phys_state_id"), port.get("rate_gbps")
    wanted = baseline.port_rates.get(f"{where['device']}/{where['port']}")
    rate_ok = rate is not None and (wanted is None or rate >= wanted)
    return [
        check("port_state", state == PORT_ACTIVE, f"{state}: {port.get('state')}", **where),
        check("port_phys_state", phys == PHYS_LINK_UP, f"{phys}: {port.get('phys_state')}",
              **where),
        check("port_rate", rate_ok, f"{rate} Gb/s (enrolled or best seen: {wanted})", **where),
    ]  # fmt: skip


def hardware_checks(telemetry: dict[str, Any], baseline: Baseline) -> list[Check]:
    gpus = telemetry.get("gpus") or []
    expected = baseline.gpu_count
    out = [check("gpu_count", expected is None or len(gpus) == expected,
                 f"{len(gpus)} GPUs visible, {expected} enrolled")]
    for gpu in gpus:
        out += gpu_checks(gpu)
    for port in telemetry.get("ib_ports") or []:
        out += port_checks(port, baseline)
    return out


def result(request: dict[str, Any], checks: list[Check], finished_at: float) -> dict[str, Any]:
    return {"id": request["id"], "level": request["level"],
            "passed": all(c["ok"] for c in checks), "checks": checks,
            "finished_at": round(finished_at, 3)}


class NodeValidator:
    """Runs one validation per new id in a thread; ``result`` is for observed state."""

    def __init__(self, telemetry: Callable[[], dict[str, Any]], dcgm: DcgmRunner | None,
                 baseline: Baseline | None = None,
                 wall: Callable[[], float] = time.time) -> None:  # fmt: skip
        self.telemetry, self.dcgm, self.wall = telemetry, dcgm, wall
        self.baseline = baseline or Baseline()
        self.on_done: Callable[[], None] | None = None
        self._lock = threading.Lock()
        self._current: dict[str, Any] | None = None  # the request being run or last run
        self._result: dict[str, Any] | None = None
        self._thread: threading.Thread | None = None

    def request(self, validation: dict[str, Any] | None) -> bool:
        """Start a run for a new id (a run in progress finishes first); True if started."""
        with self._lock:
            if validation is None or (self._current or {}).get("id") == validation["id"]:
                return False
            self._current = {"id": validation["id"], "level": int(validation["level"])}
            self._result = {**self._current, "passed": False, "running": True, "checks": [],
                            "started_at": round(self.wall(), 3)}
            previous, request = self._thread, dict(self._current)
            self._thread = threading.Thread(target=self._run, args=(request, previous),
                                            name="validation", daemon=True)  # fmt: skip
            self._thread.start()
            return True

    @property
    def result(self) -> dict[str, Any] | None:
        with self._lock:
            return None if self._result is None else dict(self._result)

    def wait(self, timeout_s: float | None = None) -> None:
        thread = self._thread
        if thread is not None:
            thread.join(timeout_s)

    def run_checks(self, request: dict[str, Any]) -> list[Check]:
        try:
            checks = hardware_checks(self.telemetry(), self.baseline)
        except Exception as exc:  # a broken read is a failed validation, never a crash
            checks = [check("telemetry", False, f"{type(exc).__name__}: {exc}")]
        if self.dcgm is not None:
            checks += self.dcgm.run(int(request["level"]))
        return checks

    def _run(self, request: dict[str, Any], previous: threading.Thread | None) -> None:
        if previous is not None:
            previous.join()
        checks = self.run_checks(request)
        done = result(request, checks, self.wall())
        with self._lock:
            if (self._current or {}).get("id") != request["id"]:
                return  # superseded while running: the newer one reports
            self._result = done
        log.info("validation finished", extra={"id": request["id"], "passed": done["passed"],
                 "failed": [c["name"] for c in checks if not c["ok"]][:20]})
        if self.on_done is not None:
            self.on_done()
