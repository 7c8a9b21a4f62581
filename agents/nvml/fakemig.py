"""The MIG part of the fake NVML (mixed into :class:`agents.nvml.fake.FakeNvml`).

It answers the profile and placement queries from :data:`agents.nvml.migtable.BOARDS`
(the same table as ``scheduler/mig.py``; a test holds them equal) and behaves as NVML does
where the agent depends on it: a mode change is pending until a reset while the GPU is in
use (``activationStatus``); a GPU instance is created only at one of its profile's
placements (``NVML_ERROR_INVALID_ARGUMENT`` otherwise) on free memory slices
(``NVML_ERROR_INSUFFICIENT_RESOURCES`` otherwise, as for the profile's instance limit);
a GPU instance with a compute instance or a process on it is not destroyed
(``NVML_ERROR_IN_USE``). Handles are Python objects; ``byref``/pointer arguments are
accepted as ctypes passes them (``._obj``) or plain.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.nvml import binding, fakecaps
from agents.nvml.migstructs import (
    ComputeInstanceInfo,
    ComputeInstanceProfileInfo,
    GpuInstanceInfo,
    GpuInstanceProfileInfo,
    Placement,
)
from agents.nvml.migtable import BOARDS, BoardProfile

MIB = 1024 * 1024
MAX_MIG_DEVICES = 7
INVALID = 0xFFFFFFFF


@dataclass(eq=False)
class FakeGpuInstance:
    gpu: Any
    id: int
    profile: BoardProfile
    start: int
    compute: dict[int, FakeComputeInstance] = field(default_factory=dict)
    destroyed: bool = False


@dataclass(eq=False)
class FakeComputeInstance:
    gi: FakeGpuInstance
    id: int
    profile_id: int
    destroyed: bool = False


@dataclass(eq=False)
class FakeMigDevice:
    gpu: Any
    ci: FakeComputeInstance
    uuid: str


@dataclass
class _MigState:
    pending: int = 0
    instances: dict[int, FakeGpuInstance] = field(default_factory=dict)


def _deref(ref: Any) -> Any:
    return getattr(ref, "_obj", ref)


def _mig_uuid(parent_uuid: str, gi: int, ci: int) -> str:
    d = hashlib.sha256(f"{parent_uuid}/{gi}/{ci}".encode()).hexdigest()
    return f"MIG-{d[:8]}-{d[8:12]}-{d[12:16]}-{d[16:20]}-{d[20:32]}"


def _fail(code: int) -> Exception:
    return binding.error(code)


class FakeMigMixin:
    """NVML's MIG calls over ``self.gpus`` (``FakeGpu``: ``mig_mode`` is the current mode)."""

    gpus: list[Any]
    processes: dict[int, Any]
    _dev: Any

    # --- test controls -------------------------------------------------------------
    def attach_caps(self, proc_root: Path) -> None:
        """Publish the MIG capability files under ``proc_root`` as the driver does under
        ``/proc`` (``fakecaps``), kept up to date as instances come and go."""
        self.__dict__["_caps_root"] = Path(proc_root)
        for gpu in self.gpus:
            self._publish_caps(gpu)

    def _publish_caps(self, gpu: Any) -> None:
        root = self.__dict__.get("_caps_root")
        if root is None or gpu.model.name not in BOARDS:
            return
        instances = {gi.id: sorted(gi.compute) for gi in self._mig(gpu).instances.values()}
        fakecaps.write_gpu(root, gpu.index, instances if gpu.mig_mode else None)

    def _mig(self, gpu: Any) -> _MigState:
        states: dict[int, _MigState] = self.__dict__.setdefault("_mig_states", {})
        return states.setdefault(gpu.index, _MigState(pending=gpu.mig_mode))

    def mig_reset(self, index: int) -> None:
        """A GPU reset: the pending MIG mode takes effect, every instance is gone."""
        gpu = self.gpus[index]
        state = self._mig(gpu)
        for gi in state.instances.values():
            gi.destroyed = True
        state.instances.clear()
        gpu.mig_mode = state.pending
        self._publish_caps(gpu)

    def mig_fail_next(self, function: str, code: int) -> None:
        """Make the next call of ``function`` fail with NVML error ``code``."""
        self.__dict__.setdefault("_mig_failures", {})[function] = code

    def _maybe_fail(self, function: str) -> None:
        code = self.__dict__.get("_mig_failures", {}).pop(function, None)
        if code is not None:
            raise _fail(code)

    def _table(self, gpu: Any) -> tuple[BoardProfile, ...]:
        table = BOARDS.get(gpu.model.name)
        if table is None:
            raise _fail(binding.NVML_ERROR_NOT_SUPPORTED)
        return table

    def _enabled(self, h: Any, fn: str) -> Any:
        gpu = self._dev(h, fn)
        self._table(gpu)
        if not gpu.mig_mode:
            raise _fail(binding.NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def _gi(self, gi: Any) -> FakeGpuInstance:
        if not isinstance(gi, FakeGpuInstance) or gi.destroyed:
            raise _fail(binding.NVML_ERROR_INVALID_ARGUMENT)
        return gi

    # --- mode ----------------------------------------------------------------------
    def nvmlDeviceGetMigMode(self, h: Any) -> list[int]:
        gpu = self._dev(h, "nvmlDeviceGetMigMode")
        return [gpu.mig_mode, self._mig(gpu).pending]

    def nvmlDeviceSetMigMode(self, h: Any, mode: int) -> int:
        """Returns the activation status: 0 when applied, else the reason it waits for a
        reset (``NVML_ERROR_IN_USE`` with processes on the GPU), the mode left pending."""
        gpu = self._dev(h, "nvmlDeviceSetMigMode")
        self._table(gpu)
        state = self._mig(gpu)
        if state.instances and mode != gpu.mig_mode:
            raise _fail(binding.NVML_ERROR_IN_USE)
        state.pending = mode
        if mode == gpu.mig_mode:
            return 0
        if any(p.gpu_index == gpu.index for p in self.processes.values()):
            return binding.NVML_ERROR_IN_USE
        gpu.mig_mode = mode
        self._publish_caps(gpu)
        return 0

    # --- profiles and placements ---------------------------------------------------
    def _profile(self, gpu: Any, *, const: int | None = None,
                 profile_id: int | None = None) -> BoardProfile:
        for p in self._table(gpu):
            if p.nvml_profile == const or p.profile_id == profile_id:
                return p
        raise _fail(binding.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetGpuInstanceProfileInfo(self, h: Any, profile: int,
                                            version: int = 2) -> GpuInstanceProfileInfo:
        gpu = self._dev(h, "nvmlDeviceGetGpuInstanceProfileInfo")
        p = self._profile(gpu, const=profile)
        memory = gpu.model.memory_mib * p.memory_slices // 8
        return GpuInstanceProfileInfo(
            id=p.profile_id, sliceCount=p.compute_slices, instanceCount=p.max_instances,
            multiprocessorCount=p.compute_slices * 16, memorySizeMB=memory,
            name=f"MIG {p.name}".encode())

    def nvmlDeviceGetGpuInstancePossiblePlacements(self, h: Any, profileId: int,
                                                   placementsRef: Any, countRef: Any) -> int:
        gpu = self._dev(h, "nvmlDeviceGetGpuInstancePossiblePlacements")
        p = self._profile(gpu, profile_id=profileId)
        count = _deref(countRef)
        if placementsRef is not None:
            if len(placementsRef) < len(p.starts):
                raise _fail(binding.NVML_ERROR_INSUFFICIENT_SIZE)
            for i, start in enumerate(p.starts):
                placementsRef[i].start, placementsRef[i].size = start, p.memory_slices
        count.value = len(p.starts)
        return 0

    # --- GPU instances -------------------------------------------------------------
    def nvmlDeviceCreateGpuInstanceWithPlacement(self, h: Any, profileId: int,
                                                 placement: Any) -> FakeGpuInstance:
        gpu = self._enabled(h, "nvmlDeviceCreateGpuInstanceWithPlacement")
        self._maybe_fail("nvmlDeviceCreateGpuInstanceWithPlacement")
        p = self._profile(gpu, profile_id=profileId)
        where = _deref(placement)
        if where.start not in p.starts or where.size != p.memory_slices:
            raise _fail(binding.NVML_ERROR_INVALID_ARGUMENT)
        state = self._mig(gpu)
        taken = {s for gi in state.instances.values()
                 for s in range(gi.start, gi.start + gi.profile.memory_slices)}
        mine = sum(1 for gi in state.instances.values() if gi.profile is p)
        if taken & set(range(where.start, where.start + p.memory_slices)) \
                or mine >= p.max_instances:
            raise _fail(binding.NVML_ERROR_INSUFFICIENT_RESOURCES)
        gi_id = min(set(range(1, 64)) - set(state.instances))
        state.instances[gi_id] = FakeGpuInstance(gpu, gi_id, p, where.start)
        self._publish_caps(gpu)
        return state.instances[gi_id]

    def nvmlDeviceGetGpuInstanceById(self, h: Any, gpuInstanceId: int) -> FakeGpuInstance:
        gpu = self._enabled(h, "nvmlDeviceGetGpuInstanceById")
        gi = self._mig(gpu).instances.get(gpuInstanceId)
        if gi is None:
            raise _fail(binding.NVML_ERROR_NOT_FOUND)
        return gi

    def nvmlGpuInstanceGetInfo(self, gpuInstance: Any) -> GpuInstanceInfo:
        gi = self._gi(gpuInstance)
        return GpuInstanceInfo(gi.gpu, gi.id, gi.profile.profile_id,
                               Placement(gi.start, gi.profile.memory_slices))

    def nvmlGpuInstanceDestroy(self, gpuInstance: Any) -> int:
        gi = self._gi(gpuInstance)
        self._maybe_fail("nvmlGpuInstanceDestroy")
        busy = any(getattr(p, "gpu_instance", None) == gi.id and p.gpu_index == gi.gpu.index
                   for p in self.processes.values())
        if gi.compute or busy:
            raise _fail(binding.NVML_ERROR_IN_USE)
        gi.destroyed = True
        del self._mig(gi.gpu).instances[gi.id]
        self._publish_caps(gi.gpu)
        return 0

    # --- compute instances ---------------------------------------------------------
    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
            self, gpuInstance: Any, profile: int, engProfile: int,
            version: int = 2) -> ComputeInstanceProfileInfo:
        gi = self._gi(gpuInstance)
        slices = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7}.get(profile)
        if slices is None or slices > gi.profile.compute_slices:
            raise _fail(binding.NVML_ERROR_NOT_SUPPORTED)
        return ComputeInstanceProfileInfo(id=profile, sliceCount=slices,
                                          instanceCount=gi.profile.compute_slices // slices)

    def nvmlGpuInstanceCreateComputeInstance(self, gpuInstance: Any,
                                             profileId: int) -> FakeComputeInstance:
        gi = self._gi(gpuInstance)
        self._maybe_fail("nvmlGpuInstanceCreateComputeInstance")
        info = self.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, profileId, 0)
        used = sum({0: 1, 1: 2, 2: 3, 3: 4, 4: 7}[c.profile_id] for c in gi.compute.values())
        if used + info.sliceCount > gi.profile.compute_slices:
            raise _fail(binding.NVML_ERROR_INSUFFICIENT_RESOURCES)
        ci_id = min(set(range(8)) - set(gi.compute))
        gi.compute[ci_id] = FakeComputeInstance(gi, ci_id, profileId)
        self._publish_caps(gi.gpu)
        return gi.compute[ci_id]

    def nvmlGpuInstanceGetComputeInstanceById(self, gpuInstance: Any,
                                              computeInstanceId: int) -> FakeComputeInstance:
        ci = self._gi(gpuInstance).compute.get(computeInstanceId)
        if ci is None:
            raise _fail(binding.NVML_ERROR_NOT_FOUND)
        return ci

    def nvmlComputeInstanceGetInfo(self, computeInstance: Any) -> ComputeInstanceInfo:
        ci = computeInstance
        if not isinstance(ci, FakeComputeInstance) or ci.destroyed:
            raise _fail(binding.NVML_ERROR_INVALID_ARGUMENT)
        return ComputeInstanceInfo(ci.gi.gpu, ci.gi, ci.id, ci.profile_id,
                                   Placement(0, ci.gi.profile.compute_slices))

    def nvmlComputeInstanceDestroy(self, computeInstance: Any) -> int:
        ci = computeInstance
        if not isinstance(ci, FakeComputeInstance) or ci.destroyed:
            raise _fail(binding.NVML_ERROR_INVALID_ARGUMENT)
        self._maybe_fail("nvmlComputeInstanceDestroy")
        if any(getattr(p, "gpu_instance", None) == ci.gi.id and p.gpu_index == ci.gi.gpu.index
               for p in self.processes.values()):
            raise _fail(binding.NVML_ERROR_IN_USE)
        ci.destroyed = True
        del ci.gi.compute[ci.id]
        self._publish_caps(ci.gi.gpu)
        return 0

    # --- MIG devices ---------------------------------------------------------------
    def _mig_devices(self, gpu: Any) -> list[FakeMigDevice]:
        cis = [ci for _, gi in sorted(self._mig(gpu).instances.items())
               for _, ci in sorted(gi.compute.items())]
        return [FakeMigDevice(gpu, ci, _mig_uuid(gpu.uuid, ci.gi.id, ci.id)) for ci in cis]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: Any) -> int:
        gpu = self._dev(h, "nvmlDeviceGetMaxMigDeviceCount")
        return MAX_MIG_DEVICES if gpu.mig_mode and gpu.model.name in BOARDS else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: Any, index: int) -> FakeMigDevice:
        devices = self._mig_devices(self._enabled(h, "nvmlDeviceGetMigDeviceHandleByIndex"))
        if not 0 <= index < len(devices):
            raise _fail(binding.NVML_ERROR_NOT_FOUND)
        return devices[index]

    def nvmlDeviceIsMigDeviceHandle(self, h: Any) -> int:
        return 1 if isinstance(h, FakeMigDevice) else 0

    def _mig_device(self, h: Any) -> FakeMigDevice:
        if not isinstance(h, FakeMigDevice):
            raise _fail(binding.NVML_ERROR_NOT_SUPPORTED)
        if h.ci.destroyed:
            raise _fail(binding.NVML_ERROR_INVALID_ARGUMENT)
        return h

    def nvmlDeviceGetGpuInstanceId(self, h: Any) -> int:
        return self._mig_device(h).ci.gi.id

    def nvmlDeviceGetComputeInstanceId(self, h: Any) -> int:
        return self._mig_device(h).ci.id

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, h: Any) -> Any:
        return self._mig_device(h).gpu

    def mig_memory(self, h: FakeMigDevice) -> tuple[int, int]:
        """(total, used) bytes of a MIG device (for ``nvmlDeviceGetMemoryInfo``)."""
        dev = self._mig_device(h)
        total = dev.gpu.model.memory_mib * dev.ci.gi.profile.memory_slices // 8 * MIB
        used = sum(p.used_bytes for p in self.processes.values()
                   if p.gpu_index == dev.gpu.index
                   and getattr(p, "gpu_instance", None) == dev.ci.gi.id)
        return total, used
