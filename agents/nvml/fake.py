"""A fake NVML with ``pynvml``'s call surface that raises the real ``pynvml`` exceptions.

Models H100 / H200 / A100 boards (names, PCI ids, memory from nvml.md), per-field
NotSupported, GPU lost, and an XID event stream (``inject_xid``).
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from agents.host import CommandResult
from agents.nvml import binding
from agents.nvml.fakemig import FakeMigDevice, FakeMigMixin

MIB = 1024 * 1024


@dataclass(frozen=True)
class GpuModel:
    name: str
    pci_device_id: int
    memory_mib: int
    nvlinks: int
    max_power_w: int
    sm_clock_mhz: int
    mem_clock_mhz: int


MODELS: dict[str, GpuModel] = {
    "h100": GpuModel("NVIDIA H100 80GB HBM3", 0x233010DE, 81559, 18, 700, 1980, 2619),
    "h200": GpuModel("NVIDIA H200 141GB HBM3e", 0x233510DE, 144384, 18, 700, 1980, 3201),
    "a100": GpuModel("NVIDIA A100-SXM4-80GB", 0x20B210DE, 81920, 12, 400, 1410, 1593),
}
HGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)

# Function names a test can make NotSupported per GPU (``unsupported``).
FIELDS = (
    "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetTemperature",
    "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetRemappedRows", "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetMigMode", "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceResetGpuLockedClocks", "nvmlDeviceResetMemoryLockedClocks",
    "nvmlDeviceResetApplicationsClocks",
    "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetEnforcedPowerLimit",
)  # fmt: skip


@dataclass
class _Struct:
    busId: str = ""  # pynvml attribute names
    pciDeviceId: int = 0


@dataclass
class _Mem:
    total: int
    free: int
    used: int


@dataclass
class _Util:
    gpu: int
    memory: int


@dataclass
class _FieldValue:  # the fields of pynvml's c_nvmlFieldValue_t the agent reads
    fieldId: int
    nvmlReturn: int
    valueType: int = 1  # NVML_VALUE_TYPE_UNSIGNED_INT
    uiVal: int = 0

    @property
    def value(self) -> _FieldValue:  # pynvml: ``fv.value.uiVal``
        return self


@dataclass
class _Event:
    device: Any
    eventType: int
    eventData: int
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


@dataclass
class _Process:  # the fields of pynvml's c_nvmlProcessInfo_t (v2/v3)
    pid: int
    usedGpuMemory: int | None
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


@dataclass
class FakeProcess:
    pid: int
    gpu_index: int
    used_bytes: int
    owner: str = ""
    unkillable: bool = False  # e.g. stuck in the driver (D state): a kill does not end it
    graphics: bool = False  # listed by ...GraphicsRunningProcesses, not ...Compute...
    gpu_instance: int | None = None  # the MIG GPU instance id it runs in (MIG mode)


@dataclass(eq=False)
class FakeGpu:
    index: int
    model: GpuModel
    uuid: str
    bus_id: str
    util_pct: int = 0
    mem_util_pct: int = 0
    used_mib: int = 0
    temperature_c: int = 35
    power_mw: int = 90_000
    energy_mj: int = 0
    mig_mode: int = 0
    ecc_uncorrected: int = 0
    remapped: tuple[int, int, int, int] = (0, 0, 0, 0)
    unsupported: set[str] = field(default_factory=set)
    lost: bool = False
    clocks_event_reasons: int = 0  # nvmlClocksEventReason* bits
    recovery_action: int = 0  # NVML_GPU_RECOVERY_ACTION_*
    sm_clock_override_mhz: int | None = None  # None: the model's
    power_limit_mw: int | None = None  # None: the model's max power


def _gi(gpu_instance: int | None) -> int:
    return 0xFFFFFFFF if gpu_instance is None else gpu_instance


def parse_spec(spec: str) -> list[str]:
    """``h100x8`` or ``h100x4,a100x4`` -> model keys, one per GPU."""
    models: list[str] = []
    for part in spec.lower().split(","):
        name, _, count = part.strip().partition("x")
        if name not in MODELS:
            raise ValueError(f"unknown GPU model {name!r} (known: {', '.join(MODELS)})")
        models.extend([name] * (int(count) if count else 1))
    return models


class FakeNvml(FakeMigMixin):
    """Instances are used exactly like the ``pynvml`` module (MIG calls: fakemig.py)."""

    NVMLError = binding.NVMLError

    def __init__(self, spec: str = "h100x8", host: str = "fake", seed: int = 0) -> None:
        for name, value in binding.CONSTANTS.items():
            setattr(self, name, value)
        self.driver_version = "550.90.07"
        self.nvml_version = "12.550.90.07"
        self.init_error: int | None = None  # e.g. NVML_ERROR_LIBRARY_NOT_FOUND
        self._init_count = 0
        self._rng = random.Random(seed)
        self._events: deque[_Event] = deque()
        self._cond = threading.Condition()
        self._registered: set[int] = set()
        self._handing = False  # an event was returned and the waiter has not come back yet
        self.processes: dict[int, FakeProcess] = {}
        self.resets: list[tuple[int, str]] = []  # (gpu index, NVML reset function)
        self.gpus: list[FakeGpu] = [self._make(i, m, host) for i, m in enumerate(parse_spec(spec))]

    @staticmethod
    def _make(index: int, model: str, host: str) -> FakeGpu:
        digest = hashlib.sha256(f"{host}/{index}".encode()).hexdigest()
        uuid = f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
        bus = HGX_BUSES[index % len(HGX_BUSES)] + 0x100 * (index // len(HGX_BUSES))
        return FakeGpu(index, MODELS[model], uuid, f"00000000:{bus:02X}:00.0")

    # --- test controls -------------------------------------------------------------
    def set_unsupported(self, index: int, *functions: str) -> None:
        self.gpus[index].unsupported.update(functions)

    def lose(self, index: int) -> None:
        self.gpus[index].lost = True

    def inject_xid(self, index: int, xid: int) -> None:
        with self._cond:
            if index in self._registered:
                self._events.append(_Event(self.gpus[index], 8, xid))
                self._cond.notify_all()

    def settle(self, timeout_s: float = 1.0) -> bool:
        """Wait until the XID watcher has taken and handled every injected event (it
        comes back to ``nvmlEventSetWait`` after handling one); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._events and not self._handing,
                                       timeout_s)  # fmt: skip

    def add_process(self, index: int, pid: int, used_mib: int = 1024, owner: str = "",
                    unkillable: bool = False, graphics: bool = False) -> None:  # fmt: skip
        """A compute process (a CUDA context; ``graphics``: a graphics one) on GPU
        ``index``, run by account ``owner``."""
        self.processes[pid] = FakeProcess(pid, index, used_mib * MIB, owner, unkillable,
                                          graphics)  # fmt: skip

    def end_processes(self, *, pid: int | None = None, owner: str | None = None) -> int:
        """Ends the killable processes matching ``pid`` or ``owner``; returns how many."""
        doomed = [p.pid for p in self.processes.values() if not p.unkillable
                  and (p.pid == pid or (owner is not None and p.owner == owner))]  # fmt: skip
        for victim in doomed:
            del self.processes[victim]
        return len(doomed)

    def host_handler(self, call: tuple[str, ...]) -> CommandResult | None:
        """For ``FakeHost.handlers``: ``kill -KILL <pid>`` / ``pkill -KILL -u <account>``
        end this fake's processes, as they would on a real host."""
        if call[:2] == ("kill", "-KILL") and len(call) == 3 and call[2].isdigit():
            pid = int(call[2])
            if pid not in self.processes:
                return CommandResult(1, "", f"kill: ({pid}) - No such process")
            self.end_processes(pid=pid)
            return CommandResult(0)
        if call[:3] == ("pkill", "-KILL", "-u") and len(call) == 4:
            return CommandResult(0 if self.end_processes(owner=call[3]) else 1)
        return None

    def tick(self, seconds: float) -> None:
        """Advance simulated load and the energy counter."""
        for gpu in self.gpus:
            if gpu.lost:
                continue
            gpu.util_pct = self._rng.randint(0, 100)
            gpu.mem_util_pct = self._rng.randint(0, gpu.util_pct)
            gpu.used_mib = int(gpu.model.memory_mib * gpu.util_pct / 100)
            gpu.power_mw = 70_000 + int((gpu.model.max_power_w - 70) * 10 * gpu.util_pct)
            gpu.temperature_c = 30 + gpu.util_pct // 2
            gpu.energy_mj += int(gpu.power_mw * seconds)

    # --- pynvml surface ------------------------------------------------------------
    def _check_init(self) -> None:
        if self._init_count <= 0:
            raise binding.error(binding.NVML_ERROR_UNINITIALIZED)

    def _dev(self, h: Any, fn: str) -> FakeGpu:
        self._check_init()
        if not isinstance(h, FakeGpu):
            raise binding.error(binding.NVML_ERROR_INVALID_ARGUMENT)
        if h.lost:
            raise binding.error(binding.NVML_ERROR_GPU_IS_LOST)
        if fn in h.unsupported:
            raise binding.error(binding.NVML_ERROR_NOT_SUPPORTED)
        return h

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise binding.error(self.init_error)
        self._init_count += 1

    def nvmlShutdown(self) -> None:
        self._check_init()
        self._init_count -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check_init()
        return self.driver_version

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._check_init()
        return self.nvml_version

    def nvmlDeviceGetCount(self) -> int:
        self._check_init()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._check_init()
        if not 0 <= index < len(self.gpus):
            raise binding.error(binding.NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        if isinstance(h, FakeMigDevice):
            return h.uuid
        return self._dev(h, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetName(self, h: Any) -> str:
        return self._dev(h, "nvmlDeviceGetName").model.name

    def nvmlDeviceGetPciInfo(self, h: Any) -> _Struct:
        g = self._dev(h, "nvmlDeviceGetPciInfo")
        return _Struct(busId=g.bus_id, pciDeviceId=g.model.pci_device_id)

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> _Mem:
        if isinstance(h, FakeMigDevice):
            total, used = self.mig_memory(h)
            return _Mem(total=total, free=total - used, used=used)
        g = self._dev(h, "nvmlDeviceGetMemoryInfo")
        total, used = g.model.memory_mib * MIB, g.used_mib * MIB
        return _Mem(total=total, free=total - used, used=used)

    def nvmlDeviceGetUtilizationRates(self, h: Any) -> _Util:
        g = self._dev(h, "nvmlDeviceGetUtilizationRates")
        if g.mig_mode:
            raise binding.error(binding.NVML_ERROR_NOT_SUPPORTED)
        return _Util(gpu=g.util_pct, memory=g.mem_util_pct)

    def nvmlDeviceGetTemperature(self, h: Any, sensor: int) -> int:
        return self._dev(h, "nvmlDeviceGetTemperature").temperature_c

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:
        return self._dev(h, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, h: Any) -> int:
        return self._dev(h, "nvmlDeviceGetTotalEnergyConsumption").energy_mj

    def nvmlDeviceGetClockInfo(self, h: Any, clock: int) -> int:
        g = self._dev(h, "nvmlDeviceGetClockInfo")
        if clock == self.NVML_CLOCK_SM:  # type: ignore[attr-defined]
            return g.model.sm_clock_mhz if g.sm_clock_override_mhz is None \
                else g.sm_clock_override_mhz
        return g.model.mem_clock_mhz

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Any) -> int:
        return self._dev(h, "nvmlDeviceGetCurrentClocksEventReasons").clocks_event_reasons

    def nvmlDeviceGetEnforcedPowerLimit(self, h: Any) -> int:
        g = self._dev(h, "nvmlDeviceGetEnforcedPowerLimit")
        return g.model.max_power_w * 1000 if g.power_limit_mw is None else g.power_limit_mw

    def nvmlDeviceGetFieldValues(self, h: Any, field_ids: list[int]) -> list[_FieldValue]:
        """Per-value ``nvmlReturn`` as the real call: only the recovery action is known."""
        g = self._dev(h, "nvmlDeviceGetFieldValues")
        known = {binding.CONSTANTS["NVML_FI_DEV_GET_GPU_RECOVERY_ACTION"]: g.recovery_action}
        return [_FieldValue(f, 0, uiVal=known[f]) if f in known
                else _FieldValue(f, binding.NVML_ERROR_NOT_SUPPORTED) for f in field_ids]

    def nvmlDeviceGetEccMode(self, h: Any) -> list[int]:
        self._dev(h, "nvmlDeviceGetEccMode")
        return [1, 1]

    def nvmlDeviceGetTotalEccErrors(self, h: Any, kind: int, counter: int) -> int:
        return self._dev(h, "nvmlDeviceGetTotalEccErrors").ecc_uncorrected

    def nvmlDeviceGetRemappedRows(self, h: Any) -> tuple[int, int, int, int]:
        return self._dev(h, "nvmlDeviceGetRemappedRows").remapped

    def nvmlDeviceGetNvLinkState(self, h: Any, link: int) -> int:
        g = self._dev(h, "nvmlDeviceGetNvLinkState")
        if link >= g.model.nvlinks:
            raise binding.error(binding.NVML_ERROR_INVALID_ARGUMENT)
        return 1

    def _processes(self, h: Any, fn: str, graphics: bool) -> list[_Process]:
        g = self._dev(h, fn)
        return [_Process(p.pid, p.used_bytes, _gi(p.gpu_instance)) for p in sorted(
            self.processes.values(), key=lambda p: p.pid)
            if p.gpu_index == g.index and p.graphics == graphics]  # fmt: skip

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[_Process]:
        return self._processes(h, "nvmlDeviceGetComputeRunningProcesses", graphics=False)

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: Any) -> list[_Process]:
        return self._processes(h, "nvmlDeviceGetGraphicsRunningProcesses", graphics=True)

    def _reset(self, h: Any, fn: str) -> None:
        self.resets.append((self._dev(h, fn).index, fn))

    def nvmlDeviceResetGpuLockedClocks(self, h: Any) -> None:
        self._reset(h, "nvmlDeviceResetGpuLockedClocks")

    def nvmlDeviceResetMemoryLockedClocks(self, h: Any) -> None:
        self._reset(h, "nvmlDeviceResetMemoryLockedClocks")

    def nvmlDeviceResetApplicationsClocks(self, h: Any) -> None:
        self._reset(h, "nvmlDeviceResetApplicationsClocks")

    def nvmlEventSetCreate(self) -> object:
        self._check_init()
        return object()

    def nvmlEventSetFree(self, event_set: object) -> None:
        return None

    def nvmlDeviceRegisterEvents(self, h: Any, types: int, event_set: object) -> None:
        g = self._dev(h, "nvmlDeviceRegisterEvents")
        self._registered.add(g.index)

    def nvmlEventSetWait(self, event_set: object, timeout_ms: int) -> _Event:
        with self._cond:
            self._handing = False
            self._cond.notify_all()
            if not self._events:
                self._cond.wait(timeout_ms / 1000.0)
            if not self._events:
                raise binding.error(binding.NVML_ERROR_TIMEOUT)
            self._handing = True
            return self._events.popleft()
