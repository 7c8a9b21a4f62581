"""A fault control file for the fake NVML of a RUNNING agent (``--fake-faults PATH``).

JSON lines, one fault per line, applied to :class:`agents.nvml.fake.FakeNvml` as the
hardware would show it. The file is re-read each time the agent samples; only lines
appended since the last read are applied (a partial last line waits for its newline).
A bad line is logged and skipped; it never stops the agent. Line kinds (``gpu`` is the
NVML index):

    {"gpu": 3, "xid": 79}               an XID event (as ``inject_xid``): event stream, last_xid
    {"gpu": 3, "lost": true}            fallen off the bus: every call raises GpuIsLost
    {"gpu": 1, "ecc_dbe": 2}            volatile uncorrected ECC count += 2
    {"gpu": 1, "remap": "pending"}      nvmlDeviceGetRemappedRows isPending (or "failure")
    {"gpu": 2, "thermal": true}         clocks event reasons HW slowdown + HW thermal slowdown
    {"gpu": 2, "power_brake": true}     clocks event reasons HW slowdown + HW power brake
    {"gpu": 2, "recovery_action": 2}    NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (0 none … 4)
    {"gpu": 2, "clear": true}           repaired: back to healthy
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents.nvml import binding
from agents.nvml.fake import FakeGpu, FakeNvml

log = logging.getLogger("agents.nvml.faults")

KINDS = ("xid", "lost", "ecc_dbe", "remap", "thermal", "power_brake", "recovery_action",
         "clear")  # fmt: skip
_THERMAL = binding.HW_SLOWDOWN | binding.HW_THERMAL_SLOWDOWN
_BRAKE = binding.HW_SLOWDOWN | binding.HW_POWER_BRAKE_SLOWDOWN


class FaultError(ValueError):
    pass


def _int(line: dict[str, Any], key: str, lo: int = 0, hi: int = 2**31 - 1) -> int:
    value = line[key]
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise FaultError(f"{key}: must be an integer in {lo}..{hi}")
    return value


def _bool(line: dict[str, Any], key: str) -> bool:
    if not isinstance(line[key], bool):
        raise FaultError(f"{key}: must be true or false")
    return bool(line[key])


def _set_bits(gpu: FakeGpu, bits: int, on: bool) -> None:
    gpu.clocks_event_reasons = (gpu.clocks_event_reasons | bits) if on \
        else (gpu.clocks_event_reasons & ~bits)


def clear(gpu: FakeGpu) -> None:
    """Back to a healthy GPU (repaired, reset): every injected fault undone."""
    gpu.lost = False
    gpu.ecc_uncorrected = 0
    gpu.remapped = (gpu.remapped[0], gpu.remapped[1], 0, 0)
    gpu.clocks_event_reasons = 0
    gpu.recovery_action = 0


def apply_fault(api: FakeNvml, line: Any) -> str:
    """Apply one parsed control line; returns its kind. Raises FaultError when bad."""
    if not isinstance(line, dict):
        raise FaultError("must be a JSON object")
    kinds = [k for k in KINDS if k in line]
    if len(kinds) != 1:
        raise FaultError(f"needs exactly one of {', '.join(KINDS)}")
    if "gpu" not in line:
        raise FaultError("gpu: is required")
    index, kind = _int(line, "gpu", hi=len(api.gpus) - 1), kinds[0]
    gpu = api.gpus[index]
    if kind == "xid":
        api.inject_xid(index, _int(line, "xid"))
    elif kind == "lost":
        gpu.lost = _bool(line, "lost")
    elif kind == "ecc_dbe":
        gpu.ecc_uncorrected += _int(line, "ecc_dbe")
    elif kind == "remap":
        _remap(gpu, line["remap"])
    elif kind == "thermal":
        _set_bits(gpu, _THERMAL, _bool(line, "thermal"))
    elif kind == "power_brake":
        _set_bits(gpu, _BRAKE, _bool(line, "power_brake"))
    elif kind == "recovery_action":
        gpu.recovery_action = _int(line, "recovery_action", hi=max(binding.RECOVERY_ACTIONS))
    elif _bool(line, "clear"):
        clear(gpu)
    return kind


def _remap(gpu: FakeGpu, what: Any) -> None:
    corrected, uncorrected, _, _ = gpu.remapped
    if what == "pending":
        gpu.remapped = (corrected, uncorrected + 1, 1, 0)
    elif what == "failure":
        gpu.remapped = (corrected, uncorrected + 1, 0, 1)
    else:
        raise FaultError('remap: must be "pending" or "failure"')


class LineFollower:
    """The JSON lines appended to a file since the last ``read`` (a partial last line
    waits for its newline; a missing file is no lines). Bad JSON is given back as
    ``FaultError`` items, for the caller to log and skip."""

    def __init__(self, path: Path | str) -> None:
        self.path, self.offset = Path(path), 0

    def read(self) -> list[Any]:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1
        self.offset += end
        out: list[Any] = []
        for raw in data[:end].splitlines():
            if raw.strip():
                try:
                    out.append(json.loads(raw))
                except ValueError as exc:
                    out.append(FaultError(f"not JSON: {exc}"))
        return out


class FaultFile:
    """Follows one control file; ``poll()`` applies what was appended since the last."""

    def __init__(self, path: Path | str, api: FakeNvml,
                 on_clear: Callable[[str], None] | None = None) -> None:  # fmt: skip
        self.lines, self.api, self.on_clear = LineFollower(path), api, on_clear
        self.applied = 0
        self.skipped = 0

    def poll(self) -> int:
        """Apply the new complete lines; returns how many were applied."""
        kinds = [self._one(line) for line in self.lines.read()]
        if "xid" in kinds:  # the XID watcher has recorded them before this sample reads
            self.api.settle()
        applied = sum(kind is not None for kind in kinds)
        self.applied += applied
        return applied

    def _one(self, line: Any) -> str | None:
        try:
            if isinstance(line, FaultError):
                raise line
            kind = apply_fault(self.api, line)
        except FaultError as exc:
            self.skipped += 1
            log.warning("bad fault line skipped", extra={"path": str(self.lines.path),
                                                         "error": str(exc)[:200]})
            return None
        if kind == "clear" and self.on_clear is not None:
            self.on_clear(self.api.gpus[int(line["gpu"])].uuid)
        log.warning("fault injected", extra={"fault": line})
        return kind
