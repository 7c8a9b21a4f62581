"""GPU cleaning when a lease's grant is torn down (issue 10.4).

After the access manager has ended the lease account's sessions and processes, each of
the lease's GPUs is checked with NVML (``nvmlDeviceGetComputeRunningProcesses`` and
``…GraphicsRunningProcesses``): any
process still holding it is killed by pid through the host interface, and the GPU is
polled (bounded) until none is left. Then what NVML can reset without a GPU reset is
reset (locked GPU/memory clocks, application clocks). The result, one per GPU, goes into
observed state (``gpu_cleaning``, docs/agent-protocol.md §5.2): ``clean`` is true only if
NVML answered and no process holds the GPU. What the agent cannot do is said in
``not_reset`` (a full GPU reset is not attempted: on NVSwitch systems it needs every GPU
idle and the fabric manager; an operator or the portal's quarantine decides).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from agents.host import HostCommands
from agents.nvml import binding

log = logging.getLogger("agents.node.cleaning")

RESETS = (
    ("gpu_locked_clocks", "nvmlDeviceResetGpuLockedClocks"),
    ("memory_locked_clocks", "nvmlDeviceResetMemoryLockedClocks"),
    ("applications_clocks", "nvmlDeviceResetApplicationsClocks"),
)
NOT_ATTEMPTED = {"item": "gpu_reset", "reason": (
    "a full GPU reset (nvidia-smi --gpu-reset) is not attempted by the agent: it needs "
    "every process off the GPU and, on NVSwitch systems, the fabric manager")}  # fmt: skip


class GpuCleaner:
    def __init__(self, api: Any | None, host: HostCommands, wait_s: float = 5.0,
                 step_s: float = 0.05, sleep: Callable[[float], None] = time.sleep,
                 wall: Callable[[], float] = time.time) -> None:  # fmt: skip
        self.api: Any = api
        self.host, self.wait_s, self.step_s = host, wait_s, step_s
        self.sleep, self.wall = sleep, wall

    def clean(self, lease_id: str, gpu_indices: list[int]) -> list[dict[str, Any]]:
        return [self._clean_one(lease_id, index) for index in sorted(set(gpu_indices))]

    def _clean_one(self, lease_id: str, index: int) -> dict[str, Any]:
        result: dict[str, Any] = {"gpu_index": index, "lease_id": lease_id, "clean": False,
                                  "processes": [], "killed": [], "reset": [], "not_reset": []}
        try:
            handle = self._handle(index)
            result["gpu_uuid"] = _text(self.api.nvmlDeviceGetUUID(handle))
            result["killed"], result["processes"] = self._drain(handle)
        except binding.NVMLError as exc:
            result["not_reset"].append({"item": "processes", "reason": f"NVML: {exc}"})
            result["checked_at"] = self.wall()
            return result
        result["clean"] = not result["processes"]
        self._resets(handle, result)
        result["checked_at"] = self.wall()
        log.info("gpu cleaned" if result["clean"] else "gpu NOT clean",
                 extra={"gpu_index": index, "lease_id": lease_id,
                        "processes": result["processes"], "killed": result["killed"]})
        return result

    def _handle(self, index: int) -> Any:
        if self.api is None:
            raise binding.error(binding.NVML_ERROR_UNINITIALIZED)
        return self.api.nvmlDeviceGetHandleByIndex(index)

    def _pids(self, handle: Any) -> list[int]:
        """Compute (CUDA) and graphics processes holding the GPU."""
        procs = list(self.api.nvmlDeviceGetComputeRunningProcesses(handle))
        graphics = getattr(self.api, "nvmlDeviceGetGraphicsRunningProcesses", None)
        if graphics is not None:
            with contextlib.suppress(binding.NotSupported):
                procs += graphics(handle)
        return sorted({int(p.pid) for p in procs})

    def _drain(self, handle: Any) -> tuple[list[int], list[int]]:
        """Kill what still holds the GPU; wait (bounded) until NVML lists nothing."""
        pids, killed = self._pids(handle), []
        for pid in pids:
            self.host.run(["kill", "-KILL", str(pid)])
            killed.append(pid)
        deadline = time.monotonic() + self.wait_s
        while pids and time.monotonic() < deadline:
            self.sleep(self.step_s)
            pids = self._pids(handle)
        return killed, pids

    def _resets(self, handle: Any, result: dict[str, Any]) -> None:
        for item, fn in RESETS:
            try:
                getattr(self.api, fn)(handle)
                result["reset"].append(item)
            except binding.NVMLError as exc:
                result["not_reset"].append({"item": item, "reason": f"NVML: {exc}"})
            except AttributeError:
                result["not_reset"].append({"item": item, "reason": "not in these bindings"})
        result["not_reset"].append(dict(NOT_ATTEMPTED))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
