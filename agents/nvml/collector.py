"""NVML collector: every field of every GPU is read on its own.

NotSupported -> the field is absent (never 0). GpuIsLost -> the GPU is marked lost and
unhealthy and the rest of its fields are skipped. Any other NVML error -> the field is
absent and the error is recorded in ``errors``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agents.nvml import binding

# XIDs after which a GPU must not be handed out again until checked (see nvml.md).
CRITICAL_XIDS: frozenset[int] = frozenset({48, 64, 74, 79, 94, 95, 119, 120})


@dataclass
class GpuSample:
    index: int
    uuid: str | None = None
    name: str | None = None
    pci_bus_id: str | None = None
    healthy: bool = True
    lost: bool = False
    unhealthy_reasons: list[str] = field(default_factory=list)
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    memory_free_bytes: int | None = None
    gpu_util_pct: int | None = None
    mem_util_pct: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    energy_mj: int | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    ecc_uncorrected_volatile: int | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    clocks_event_reasons: int | None = None  # nvmlClocksEventReason* bit mask
    recovery_action: int | None = None  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (0 none)
    power_limit_w: float | None = None  # enforced power limit
    nvlink_active: list[bool] | None = None
    mig_mode: int | None = None
    last_xid: int | None = None
    errors: dict[str, str] = field(default_factory=dict)


@dataclass
class GpuSystemSample:
    available: bool
    error: str | None = None
    driver_version: str | None = None
    nvml_version: str | None = None
    gpus: list[GpuSample] = field(default_factory=list)


# c_nvmlValue_t member per NVML_VALUE_TYPE_* (pynvml's nvmlDeviceGetFieldValues)
_VALUE_ATTRS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal",
                6: "usVal"}  # fmt: skip


class _Lost(Exception):
    pass


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlCollector:
    """Reads GPUs through an NVML API object (``pynvml`` or the fake)."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self._lock = threading.Lock()
        self._xid: dict[str, int] = {}  # uuid -> last XID
        self._xid_unhealthy: dict[str, str] = {}
        self._lost_uuids: set[str] = set()

    def record_xid(self, uuid: str, xid: int) -> None:
        with self._lock:
            self._xid[uuid] = xid
            if xid in CRITICAL_XIDS:
                self._xid_unhealthy[uuid] = f"xid {xid}"

    def mark_lost(self, uuid: str) -> None:
        with self._lock:
            self._lost_uuids.add(uuid)

    def forget(self, uuid: str) -> None:
        """The GPU was repaired (reset, replaced): drop its XID and lost marks."""
        with self._lock:
            self._xid.pop(uuid, None)
            self._xid_unhealthy.pop(uuid, None)
            self._lost_uuids.discard(uuid)

    def collect(self) -> GpuSystemSample:
        api = self.api
        sample = GpuSystemSample(available=True)
        try:
            count = int(api.nvmlDeviceGetCount())
        except binding.NVMLError as exc:
            return GpuSystemSample(available=False, error=str(exc))
        sample.driver_version = self._sys(api.nvmlSystemGetDriverVersion)
        sample.nvml_version = self._sys(api.nvmlSystemGetNVMLVersion)
        for index in range(count):
            sample.gpus.append(self._gpu(index))
        return sample

    @staticmethod
    def _sys(fn: Callable[[], Any]) -> str | None:
        try:
            return _text(fn())
        except binding.NVMLError:
            return None

    def _gpu(self, index: int) -> GpuSample:
        gpu = GpuSample(index=index)
        try:
            handle = self.api.nvmlDeviceGetHandleByIndex(index)
            self._identity(gpu, handle)
            self._readings(gpu, handle)
        except _Lost:
            gpu.lost = True
            gpu.healthy = False
            gpu.unhealthy_reasons.append("gpu_is_lost")
        except binding.NVMLError as exc:  # handle itself unavailable
            if isinstance(exc, binding.GpuIsLost):
                gpu.lost = True
                gpu.unhealthy_reasons.append("gpu_is_lost")
            gpu.healthy = False
            gpu.errors["handle"] = str(exc)
        self._apply_events(gpu)
        return gpu

    def _apply_events(self, gpu: GpuSample) -> None:
        if gpu.uuid is None:
            return
        with self._lock:
            gpu.last_xid = self._xid.get(gpu.uuid)
            reason = self._xid_unhealthy.get(gpu.uuid)
            lost = gpu.uuid in self._lost_uuids
        if reason:
            gpu.healthy = False
            gpu.unhealthy_reasons.append(reason)
        if lost and not gpu.lost:
            gpu.lost = True
            gpu.healthy = False
            gpu.unhealthy_reasons.append("gpu_is_lost")

    def _read(self, gpu: GpuSample, name: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except binding.GpuIsLost as exc:
            raise _Lost from exc
        except binding.NotSupported:
            return None
        except binding.NVMLError as exc:
            gpu.errors[name] = str(exc)
            return None

    def _identity(self, gpu: GpuSample, h: Any) -> None:
        api = self.api
        uuid = self._read(gpu, "uuid", lambda: api.nvmlDeviceGetUUID(h))
        gpu.uuid = _text(uuid) if uuid is not None else None
        name = self._read(gpu, "name", lambda: api.nvmlDeviceGetName(h))
        gpu.name = _text(name) if name is not None else None
        pci = self._read(gpu, "pci_bus_id", lambda: api.nvmlDeviceGetPciInfo(h))
        gpu.pci_bus_id = _text(pci.busId) if pci is not None else None

    def _readings(self, gpu: GpuSample, h: Any) -> None:
        api, r = self.api, self._read
        mem = r(gpu, "memory", lambda: api.nvmlDeviceGetMemoryInfo(h))
        if mem is not None:
            gpu.memory_total_bytes, gpu.memory_used_bytes = int(mem.total), int(mem.used)
            gpu.memory_free_bytes = int(mem.free)
        util = r(gpu, "utilization", lambda: api.nvmlDeviceGetUtilizationRates(h))
        if util is not None:
            gpu.gpu_util_pct, gpu.mem_util_pct = int(util.gpu), int(util.memory)
        gpu.temperature_c = r(
            gpu, "temperature", lambda: api.nvmlDeviceGetTemperature(h, api.NVML_TEMPERATURE_GPU)
        )
        power_mw = r(gpu, "power", lambda: api.nvmlDeviceGetPowerUsage(h))
        gpu.power_w = power_mw / 1000.0 if power_mw is not None else None
        gpu.energy_mj = r(gpu, "energy", lambda: api.nvmlDeviceGetTotalEnergyConsumption(h))
        gpu.sm_clock_mhz = r(
            gpu, "sm_clock", lambda: api.nvmlDeviceGetClockInfo(h, api.NVML_CLOCK_SM)
        )
        gpu.mem_clock_mhz = r(
            gpu, "mem_clock", lambda: api.nvmlDeviceGetClockInfo(h, api.NVML_CLOCK_MEM)
        )
        gpu.ecc_uncorrected_volatile = r(
            gpu,
            "ecc_uncorrected",
            lambda: api.nvmlDeviceGetTotalEccErrors(
                h, api.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, api.NVML_VOLATILE_ECC
            ),
        )
        rows = r(gpu, "remapped_rows", lambda: api.nvmlDeviceGetRemappedRows(h))
        if rows is not None:
            gpu.remapped_rows_correctable = int(rows[0])
            gpu.remapped_rows_uncorrectable = int(rows[1])
            gpu.remapped_rows_pending, gpu.remapped_rows_failure = bool(rows[2]), bool(rows[3])
        mig = r(gpu, "mig_mode", lambda: api.nvmlDeviceGetMigMode(h))
        gpu.mig_mode = int(mig[0]) if mig is not None else None
        self._faults(gpu, h)
        gpu.nvlink_active = self._nvlinks(gpu, h)

    def _faults(self, gpu: GpuSample, h: Any) -> None:
        """Clocks event reasons, recovery action, enforced power limit (newer calls: a
        binding without them leaves the field absent)."""
        api, r = self.api, self._read
        reasons = getattr(api, "nvmlDeviceGetCurrentClocksEventReasons", None) \
            or getattr(api, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        if reasons is not None:
            value = r(gpu, "clocks_event_reasons", lambda: reasons(h))
            gpu.clocks_event_reasons = int(value) if value is not None else None
        limit = r(gpu, "power_limit", lambda: api.nvmlDeviceGetEnforcedPowerLimit(h))
        gpu.power_limit_w = limit / 1000.0 if limit is not None else None
        gpu.recovery_action = self._recovery_action(gpu, h)

    def _recovery_action(self, gpu: GpuSample, h: Any) -> int | None:
        field_id = getattr(self.api, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
        if field_id is None:
            return None
        values = self._read(gpu, "recovery_action",
                            lambda: self.api.nvmlDeviceGetFieldValues(h, [field_id]))
        if not values or int(values[0].nvmlReturn) != 0:  # per-value NVML_SUCCESS
            return None  # NotSupported on this GPU / driver: absent
        attr = _VALUE_ATTRS.get(int(values[0].valueType), "uiVal")
        return int(getattr(values[0].value, attr))

    def _nvlinks(self, gpu: GpuSample, h: Any) -> list[bool] | None:
        states: list[bool] = []
        for link in range(int(self.api.NVML_NVLINK_MAX_LINKS)):
            try:
                state = self.api.nvmlDeviceGetNvLinkState(h, link)
            except binding.GpuIsLost as exc:
                raise _Lost from exc
            except binding.NVMLError:
                break  # NotSupported / InvalidArgument past the last link
            states.append(bool(state))
        return states or None
