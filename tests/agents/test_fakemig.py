"""The fake NVML's MIG calls: the same tables as scheduler/mig.py, NVML's call shapes
(ctypes byref/arrays via agents.nvml.binding) and NVML's refusals."""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from agents.nvml import binding
from agents.nvml.fake import FakeNvml
from agents.nvml.migtable import BOARDS
from scheduler import mig


def _api(spec: str = "h100x2", mig_on: bool = True) -> FakeNvml:
    api = FakeNvml(spec, host="node-1")
    api.nvmlInit()
    if mig_on:
        for i in range(len(api.gpus)):
            assert api.nvmlDeviceSetMigMode(api.nvmlDeviceGetHandleByIndex(i), 1) == 0
    return api


def _code(exc: pytest.ExceptionInfo[BaseException]) -> int | None:
    return binding.error_code(exc.value)


def test_the_fake_answers_from_the_scheduler_catalogue() -> None:
    for board, table in BOARDS.items():
        model = mig.model_for(board)
        assert model is not None, board
        got = [(p.name, p.profile_id, p.nvml_profile, p.compute_slices, p.memory_slices,
                p.starts, p.max_instances) for p in table]
        want = [(p.name, p.profile_id, p.nvml_profile, p.compute_slices, p.memory_slices,
                 p.starts, p.max_instances) for p in model.profiles]
        assert got == want, board
    assert {n for m in mig.CATALOGUE.values() for n in m.nvml_names} == set(BOARDS)


def test_profile_constants_are_pynvmls() -> None:
    assert mig.NVML_PROFILE_1_SLICE == pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE
    assert mig.NVML_PROFILE_1_SLICE_REV1 == pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1
    assert mig.NVML_PROFILE_1_SLICE_REV2 == pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2
    assert mig.NVML_PROFILE_7_SLICE == pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE


def test_profile_info_and_placements_with_pynvml_field_names() -> None:
    api = _api()
    h = api.nvmlDeviceGetHandleByIndex(0)
    info = api.nvmlDeviceGetGpuInstanceProfileInfo(h, pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE)
    assert (info.id, info.sliceCount, info.instanceCount, info.name) == (9, 3, 2, b"MIG 3g.40gb")
    assert info.memorySizeMB == 81559 * 4 // 8
    assert binding.placements(api, h, 9) == [(0, 4), (4, 4)]
    assert binding.placements(api, h, 19) == [(s, 1) for s in range(7)]
    count = ctypes.c_uint(0)
    small = (pynvml.c_nvmlGpuInstancePlacement_t * 1)()
    with pytest.raises(pynvml.NVMLError) as exc:
        api.nvmlDeviceGetGpuInstancePossiblePlacements(h, 9, small, ctypes.byref(count))
    assert _code(exc) == pynvml.NVML_ERROR_INSUFFICIENT_SIZE
    with pytest.raises(pynvml.NVMLError_NotSupported):
        api.nvmlDeviceGetGpuInstanceProfileInfo(h, pynvml.NVML_GPU_INSTANCE_PROFILE_6_SLICE)


def test_mig_mode_is_pending_while_the_gpu_is_in_use_until_a_reset() -> None:
    api = _api("a100x1", mig_on=False)
    h = api.nvmlDeviceGetHandleByIndex(0)
    api.add_process(0, pid=77)
    assert api.nvmlDeviceSetMigMode(h, 1) == pynvml.NVML_ERROR_IN_USE
    assert api.nvmlDeviceGetMigMode(h) == [0, 1]
    with pytest.raises(pynvml.NVMLError_NotSupported):  # not in MIG mode yet
        api.nvmlDeviceCreateGpuInstanceWithPlacement(h, 19, binding.placement_ref(0, 1))
    api.end_processes(pid=77)
    api.mig_reset(0)
    assert api.nvmlDeviceGetMigMode(h) == [1, 1]


def test_creation_only_at_a_valid_placement_on_free_slices() -> None:
    api = _api()
    h = api.nvmlDeviceGetHandleByIndex(0)
    gi = api.nvmlDeviceCreateGpuInstanceWithPlacement(h, 9, binding.placement_ref(0, 4))
    info = api.nvmlGpuInstanceGetInfo(gi)
    assert (info.profileId, info.placement.start, info.placement.size) == (9, 0, 4)
    for start, size, code in [(2, 4, pynvml.NVML_ERROR_INVALID_ARGUMENT),  # not a start
                              (4, 2, pynvml.NVML_ERROR_INVALID_ARGUMENT),  # wrong size
                              (0, 4, pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)]:  # taken
        with pytest.raises(pynvml.NVMLError) as exc:
            api.nvmlDeviceCreateGpuInstanceWithPlacement(h, 9, binding.placement_ref(start, size))
        assert _code(exc) == code
    for start in (4, 5, 6):
        api.nvmlDeviceCreateGpuInstanceWithPlacement(h, 19, binding.placement_ref(start, 1))
    with pytest.raises(pynvml.NVMLError) as exc:  # slot 7 is free but no 1g starts there
        api.nvmlDeviceCreateGpuInstanceWithPlacement(h, 19, binding.placement_ref(7, 1))
    assert _code(exc) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    with pytest.raises(pynvml.NVMLError) as exc:  # overlaps the 3g at 0
        api.nvmlDeviceCreateGpuInstanceWithPlacement(h, 19, binding.placement_ref(3, 1))
    assert _code(exc) == pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES


def test_one_media_instance_at_a_time() -> None:
    api = _api()
    h = api.nvmlDeviceGetHandleByIndex(0)
    api.nvmlDeviceCreateGpuInstanceWithPlacement(h, 20, binding.placement_ref(0, 1))
    with pytest.raises(pynvml.NVMLError) as exc:
        api.nvmlDeviceCreateGpuInstanceWithPlacement(h, 20, binding.placement_ref(3, 1))
    assert _code(exc) == pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES


def test_compute_instances_mig_devices_and_destroy_order() -> None:
    api = _api()
    h = api.nvmlDeviceGetHandleByIndex(1)
    gi = api.nvmlDeviceCreateGpuInstanceWithPlacement(h, 14, binding.placement_ref(2, 2))
    ci_info = api.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 1, 0)
    ci = api.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id)
    assert api.nvmlDeviceGetMaxMigDeviceCount(h) == 7
    dev = api.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    assert api.nvmlDeviceIsMigDeviceHandle(dev) and not api.nvmlDeviceIsMigDeviceHandle(h)
    assert api.nvmlDeviceGetUUID(dev).startswith("MIG-")
    assert api.nvmlDeviceGetUUID(dev) != api.nvmlDeviceGetUUID(h)
    gi_id = api.nvmlGpuInstanceGetInfo(gi).id
    assert api.nvmlDeviceGetGpuInstanceId(dev) == gi_id
    assert api.nvmlDeviceGetComputeInstanceId(dev) == api.nvmlComputeInstanceGetInfo(ci).id
    assert api.nvmlDeviceGetMemoryInfo(dev).total == 81559 * 2 // 8 * 1024 * 1024
    with pytest.raises(pynvml.NVMLError_NotFound):
        api.nvmlDeviceGetMigDeviceHandleByIndex(h, 1)
    with pytest.raises(pynvml.NVMLError) as exc:  # a compute instance is on it
        api.nvmlGpuInstanceDestroy(gi)
    assert _code(exc) == pynvml.NVML_ERROR_IN_USE
    api.nvmlComputeInstanceDestroy(ci)
    api.nvmlGpuInstanceDestroy(gi)
    with pytest.raises(pynvml.NVMLError_NotFound):
        api.nvmlDeviceGetGpuInstanceById(h, gi_id)
