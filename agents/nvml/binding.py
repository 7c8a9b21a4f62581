"""The one module that imports ``pynvml`` (from the ``nvidia-ml-py`` distribution).

Everything else receives an *NVML API object*: this module's :func:`real_api` (the
``pynvml`` module itself) or :class:`agents.nvml.fake.FakeNvml`, which has the same call
surface and raises the same exception classes (re-exported here).
"""

from __future__ import annotations

import ctypes
from typing import Any

import pynvml

NVMLError: type[Exception] = pynvml.NVMLError
NVML_ERROR_UNINITIALIZED: int = pynvml.NVML_ERROR_UNINITIALIZED
NVML_ERROR_INVALID_ARGUMENT: int = pynvml.NVML_ERROR_INVALID_ARGUMENT
NVML_ERROR_NOT_SUPPORTED: int = pynvml.NVML_ERROR_NOT_SUPPORTED
NVML_ERROR_NO_PERMISSION: int = pynvml.NVML_ERROR_NO_PERMISSION
NVML_ERROR_NOT_FOUND: int = pynvml.NVML_ERROR_NOT_FOUND
NVML_ERROR_TIMEOUT: int = pynvml.NVML_ERROR_TIMEOUT
NVML_ERROR_GPU_IS_LOST: int = pynvml.NVML_ERROR_GPU_IS_LOST
NVML_ERROR_UNKNOWN: int = pynvml.NVML_ERROR_UNKNOWN
NVML_ERROR_LIBRARY_NOT_FOUND: int = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
NVML_ERROR_DRIVER_NOT_LOADED: int = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
NVML_ERROR_INSUFFICIENT_SIZE: int = pynvml.NVML_ERROR_INSUFFICIENT_SIZE
NVML_ERROR_INSUFFICIENT_RESOURCES: int = pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
NVML_ERROR_IN_USE: int = pynvml.NVML_ERROR_IN_USE
NVML_ERROR_RESET_REQUIRED: int = pynvml.NVML_ERROR_RESET_REQUIRED

NotSupported: type[Exception] = pynvml.NVMLError_NotSupported
GpuIsLost: type[Exception] = pynvml.NVMLError_GpuIsLost
Timeout: type[Exception] = pynvml.NVMLError_Timeout

# Constants the collector passes to NVML calls (copied onto the fake).
CONSTANTS: dict[str, int] = {
    name: int(getattr(pynvml, name))
    for name in (
        "NVML_TEMPERATURE_GPU",
        "NVML_CLOCK_SM",
        "NVML_CLOCK_MEM",
        "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
        "NVML_VOLATILE_ECC",
        "NVML_NVLINK_MAX_LINKS",
        "NVML_FEATURE_ENABLED",
        "NVML_DEVICE_MIG_ENABLE",
        "NVML_DEVICE_MIG_DISABLE",
        "NVML_GPU_INSTANCE_PROFILE_COUNT",
        "NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED",
        "nvmlEventTypeXidCriticalError",
        "NVML_SUCCESS",
        "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION",
        "nvmlClocksEventReasonHwSlowdown",
        "nvmlClocksEventReasonHwThermalSlowdown",
        "nvmlClocksEventReasonHwPowerBrakeSlowdown",
    )
}


# Bits of nvmlDeviceGetCurrentClocksEventReasons that mean the hardware slowed itself down.
HW_SLOWDOWN: int = pynvml.nvmlClocksEventReasonHwSlowdown  # 0x08
HW_THERMAL_SLOWDOWN: int = pynvml.nvmlClocksEventReasonHwThermalSlowdown  # 0x40
HW_POWER_BRAKE_SLOWDOWN: int = pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown  # 0x80
HW_CLOCKS_EVENTS: int = HW_SLOWDOWN | HW_THERMAL_SLOWDOWN | HW_POWER_BRAKE_SLOWDOWN
# NVML_FI_DEV_GET_GPU_RECOVERY_ACTION values (nvmlDeviceGpuRecoveryAction_t).
RECOVERY_ACTIONS: dict[int, str] = {
    pynvml.NVML_GPU_RECOVERY_ACTION_NONE: "none",  # 0
    pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET: "gpu_reset",  # 1
    pynvml.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT: "node_reboot",  # 2
    pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_P2P: "drain_p2p",  # 3
    pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET: "drain_and_reset",  # 4
}


def error(code: int) -> Exception:
    """The real ``pynvml`` exception for ``code`` (``NVMLError(3)`` is a NotSupported)."""
    exc: Exception = pynvml.NVMLError(code)
    return exc


def error_code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def placements(api: Any, handle: Any, profile_id: int) -> list[tuple[int, int]]:
    """``(start, size)`` of every placement NVML allows ``profile_id`` (free or not):
    ``nvmlDeviceGetGpuInstancePossiblePlacements`` asked for the count, then the array."""
    count = ctypes.c_uint(0)
    api.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, None, ctypes.byref(count))
    array = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
    api.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, array, ctypes.byref(count))
    return [(int(p.start), int(p.size)) for p in array[: count.value]]


def placement_ref(start: int, size: int) -> Any:
    """The ``const nvmlGpuInstancePlacement_t *`` of nvmlDeviceCreateGpuInstanceWithPlacement."""
    return ctypes.byref(pynvml.c_nvmlGpuInstancePlacement_t(start, size))


def real_api() -> Any:
    """The real bindings; the caller still has to ``nvmlInit()`` (may raise)."""
    return pynvml
