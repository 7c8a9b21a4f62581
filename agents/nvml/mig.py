"""Apply a MIG layout to a GPU through NVML, and read back what is there (ADR 0210).

``reconcile(api, index, desired)`` makes GPU ``index`` hold exactly the GPU instances of
``desired`` (``(profile name, start slot)`` pairs), each with one compute instance spanning
it: MIG mode first (never switched under a process; a change that waits for a GPU reset is
reported ``pending_reset`` and nothing is created), then instances not desired are
destroyed unless busy (a process runs in them: kept and reported, never killed), then the
missing ones are created at their placement. A creation that fails half-way (the GPU
instance made, its compute instance not) is rolled back; whatever a crash still leaves is
an instance the next reconcile either completes (desired) or destroys (not desired).

Profiles and placements come from NVML itself (the agent has no catalogue; the portal's
``scheduler/mig.py`` chose the layout from the same NVIDIA tables).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agents.nvml import binding

GI_ID_LIMIT = 32  # GPU instance ids are small (0..14 on A100/H100); scanned by id
CI_ID_LIMIT = 8
# compute slices -> NVML_COMPUTE_INSTANCE_PROFILE_{1,2,3,4,7}_SLICE
CI_PROFILE_BY_SLICES = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4}


@dataclass(frozen=True)
class Profile:
    name: str  # "1g.10gb"
    profile_id: int
    compute_slices: int
    size: int  # memory slices
    starts: tuple[int, ...]


@dataclass(frozen=True)
class MigInstance:
    gpu_index: int
    gpu_instance_id: int
    compute_instance_id: int | None  # None: a GPU instance without compute (half-made)
    profile: str
    start: int
    size: int
    uuid: str | None = None  # "MIG-…", for CUDA_VISIBLE_DEVICES
    busy: bool = False
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None

    @property
    def key(self) -> tuple[str, int]:
        return (self.profile, self.start)


@dataclass
class MigResult:
    gpu_index: int
    mode: str  # enabled | disabled | pending_reset | busy | unsupported | invalid
    created: list[tuple[str, int]] = field(default_factory=list)
    destroyed: list[tuple[str, int]] = field(default_factory=list)
    kept_busy: list[tuple[str, int]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    instances: list[MigInstance] = field(default_factory=list)


def _text(value: Any) -> str:
    text = value.decode() if isinstance(value, bytes) else str(value)
    return text.removeprefix("MIG ").strip()


def gpu_profiles(api: Any, handle: Any) -> dict[str, Profile]:
    """The GPU instance profiles this GPU supports, by name, with their placements."""
    out: dict[str, Profile] = {}
    for const in range(int(api.NVML_GPU_INSTANCE_PROFILE_COUNT)):
        try:
            info = api.nvmlDeviceGetGpuInstanceProfileInfo(handle, const)
            where = binding.placements(api, handle, int(info.id))
        except binding.NVMLError:
            continue
        if where:
            out[_text(info.name)] = Profile(_text(info.name), int(info.id),
                                            int(info.sliceCount), where[0][1],
                                            tuple(start for start, _ in where))
    return out


def _busy_instances(api: Any, handle: Any) -> set[int] | None:
    """GPU instance ids a process runs in (the parent's process lists, MIG mode);
    ``None`` when NVML cannot say (then every instance counts as busy)."""
    busy: set[int] = set()
    for fn in (api.nvmlDeviceGetComputeRunningProcesses,
               api.nvmlDeviceGetGraphicsRunningProcesses):
        try:
            busy |= {int(p.gpuInstanceId) for p in fn(handle)}
        except binding.NotSupported:
            continue
        except binding.NVMLError:
            return None
    return busy


def _gpu_busy(api: Any, handle: Any) -> bool:
    """Processes on the GPU; unreadable counts as busy (the mode is then left alone)."""
    try:
        return any(fn(handle) for fn in (api.nvmlDeviceGetComputeRunningProcesses,
                                         api.nvmlDeviceGetGraphicsRunningProcesses))
    except binding.NVMLError:
        return True


def _first_compute_instance(api: Any, gi: Any) -> Any | None:
    for ci_id in range(CI_ID_LIMIT):
        try:
            return api.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id)
        except binding.NVMLError:
            continue
    return None


def _mig_devices(api: Any, handle: Any) -> dict[tuple[int, int], tuple[str, Any]]:
    """(GPU instance id, compute instance id) -> (MIG UUID, memory info)."""
    out: dict[tuple[int, int], tuple[str, Any]] = {}
    for index in range(int(api.nvmlDeviceGetMaxMigDeviceCount(handle))):
        try:
            dev = api.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
            key = (int(api.nvmlDeviceGetGpuInstanceId(dev)),
                   int(api.nvmlDeviceGetComputeInstanceId(dev)))
            out[key] = (_text(api.nvmlDeviceGetUUID(dev)), api.nvmlDeviceGetMemoryInfo(dev))
        except binding.NVMLError:
            continue
    return out


def list_instances(api: Any, handle: Any, index: int) -> list[MigInstance]:
    """The GPU instances on a GPU in MIG mode, by GPU instance id."""
    by_id = {p.profile_id: p for p in gpu_profiles(api, handle).values()}
    busy, devices = _busy_instances(api, handle), _mig_devices(api, handle)
    out: list[MigInstance] = []
    for gi_id in range(GI_ID_LIMIT):
        try:
            gi = api.nvmlDeviceGetGpuInstanceById(handle, gi_id)
            info = api.nvmlGpuInstanceGetInfo(gi)
        except binding.NVMLError:
            continue
        ci = _first_compute_instance(api, gi)
        ci_id = None if ci is None else int(api.nvmlComputeInstanceGetInfo(ci).id)
        uuid, mem = devices.get((gi_id, ci_id), (None, None)) if ci_id is not None \
            else (None, None)
        profile = by_id.get(int(info.profileId))
        out.append(MigInstance(
            index, gi_id, ci_id, profile.name if profile else str(info.profileId),
            int(info.placement.start), int(info.placement.size), uuid,
            busy is None or gi_id in busy,
            None if mem is None else int(mem.total), None if mem is None else int(mem.used)))
    return out


def ensure_mig_enabled(api: Any, handle: Any) -> str:
    """``enabled`` now, or why not: ``pending_reset`` (asked; takes effect at the next GPU
    reset) or ``busy`` (processes run on the whole GPU: the mode is not touched)."""
    current, pending = (int(v) for v in api.nvmlDeviceGetMigMode(handle))
    enable = int(api.NVML_DEVICE_MIG_ENABLE)
    if current == enable:
        return "enabled"
    if pending == enable:
        return "pending_reset"
    if _gpu_busy(api, handle):
        return "busy"
    status = int(api.nvmlDeviceSetMigMode(handle, enable))
    current = int(api.nvmlDeviceGetMigMode(handle)[0])
    return "enabled" if status == 0 and current == enable else "pending_reset"


def check_layout(desired: Sequence[tuple[str, int]], profiles: dict[str, Profile]) -> list[str]:
    """Why ``desired`` cannot be made on a GPU with ``profiles`` (empty: it can)."""
    errors: list[str] = []
    taken: set[int] = set()
    for name, start in desired:
        p = profiles.get(name)
        if p is None:
            errors.append(f"{name}: not a MIG profile of this GPU")
            continue
        if start not in p.starts:
            errors.append(f"{name}@{start}: not a placement (valid: {list(p.starts)})")
        slots = set(range(start, start + p.size))
        if slots & taken:
            errors.append(f"{name}@{start}: overlaps another instance")
        taken |= slots
    return errors


def _error(what: str, exc: BaseException) -> str:
    return f"{what}: NVML error {binding.error_code(exc)} ({exc})"


def _destroy(api: Any, handle: Any, inst: MigInstance) -> None:
    """Compute instances first, then the GPU instance (NVML refuses it otherwise)."""
    gi = api.nvmlDeviceGetGpuInstanceById(handle, inst.gpu_instance_id)
    while (ci := _first_compute_instance(api, gi)) is not None:
        api.nvmlComputeInstanceDestroy(ci)
    api.nvmlGpuInstanceDestroy(gi)


def _add_compute(api: Any, gi: Any, profile: Profile) -> None:
    const = CI_PROFILE_BY_SLICES[profile.compute_slices]
    info = api.nvmlGpuInstanceGetComputeInstanceProfileInfo(
        gi, const, api.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
    api.nvmlGpuInstanceCreateComputeInstance(gi, int(info.id))


def _create(api: Any, handle: Any, profile: Profile, start: int) -> None:
    """A GPU instance at ``start`` and its compute instance, or neither."""
    gi = api.nvmlDeviceCreateGpuInstanceWithPlacement(
        handle, profile.profile_id, binding.placement_ref(start, profile.size))
    try:
        _add_compute(api, gi, profile)
    except binding.NVMLError:
        # if this fails too, it stays half-made: the next reconcile completes or destroys it
        with contextlib.suppress(binding.NVMLError):
            api.nvmlGpuInstanceDestroy(gi)
        raise


def recreate(api: Any, handle: Any, inst: MigInstance) -> list[str]:
    """Destroy ``inst`` and make it again at its placement (errors; empty: done)."""
    try:
        _destroy(api, handle, inst)
        _create(api, handle, gpu_profiles(api, handle)[inst.profile], inst.start)
    except (binding.NVMLError, KeyError) as exc:
        return [_error(f"recreate {inst.profile}@{inst.start}", exc)]
    return []


def _remove_unwanted(api: Any, handle: Any, existing: list[MigInstance],
                     wanted: set[tuple[str, int]], result: MigResult) -> None:
    for inst in existing:
        if inst.key in wanted:
            continue
        if inst.busy:
            result.kept_busy.append(inst.key)
            continue
        try:
            _destroy(api, handle, inst)
            result.destroyed.append(inst.key)
        except binding.NVMLError as exc:
            result.errors.append(_error(f"destroy {inst.profile}@{inst.start}", exc))


def _add_missing(api: Any, handle: Any, existing: list[MigInstance],
                 desired: Sequence[tuple[str, int]], profiles: dict[str, Profile],
                 result: MigResult) -> None:
    have = {inst.key: inst for inst in existing}
    for name, start in desired:
        inst = have.get((name, start))
        try:
            if inst is None:
                _create(api, handle, profiles[name], start)
                result.created.append((name, start))
            elif inst.compute_instance_id is None:  # half-made earlier: complete it
                gi = api.nvmlDeviceGetGpuInstanceById(handle, inst.gpu_instance_id)
                _add_compute(api, gi, profiles[name])
                result.created.append((name, start))
        except binding.NVMLError as exc:
            result.errors.append(_error(f"create {name}@{start}", exc))


def reconcile(api: Any, index: int, desired: Sequence[tuple[str, int]]) -> MigResult:
    """Make GPU ``index`` hold the GPU instances ``desired`` (see the module text)."""
    handle = api.nvmlDeviceGetHandleByIndex(index)
    profiles = gpu_profiles(api, handle)
    if not profiles:
        return MigResult(index, "unsupported")
    errors = check_layout(desired, profiles)
    if errors:
        return MigResult(index, "invalid", errors=errors)
    current = int(api.nvmlDeviceGetMigMode(handle)[0])
    if not desired and current != int(api.NVML_DEVICE_MIG_ENABLE):
        return MigResult(index, "disabled")
    result = MigResult(index, ensure_mig_enabled(api, handle))
    if result.mode != "enabled":
        return result
    _remove_unwanted(api, handle, list_instances(api, handle, index), set(desired), result)
    _add_missing(api, handle, list_instances(api, handle, index), desired, profiles, result)
    result.instances = list_instances(api, handle, index)
    return result
