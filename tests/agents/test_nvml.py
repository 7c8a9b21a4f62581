import time

import pynvml
import pytest

from agents.nvml.collector import NvmlCollector
from agents.nvml.fake import FakeNvml, parse_spec
from agents.nvml.xid import XidWatcher


def _fake(spec: str = "h100x8") -> FakeNvml:
    api = FakeNvml(spec, host="node-017")
    api.nvmlInit()
    return api


def test_fake_raises_real_pynvml_classes() -> None:
    api = FakeNvml("a100x1")
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        api.nvmlDeviceGetCount()
    api.nvmlInit()
    h = api.nvmlDeviceGetHandleByIndex(0)
    api.set_unsupported(0, "nvmlDeviceGetPowerUsage")
    with pytest.raises(pynvml.NVMLError_NotSupported):
        api.nvmlDeviceGetPowerUsage(h)
    api.lose(0)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        api.nvmlDeviceGetUUID(h)
    es = api.nvmlEventSetCreate()
    with pytest.raises(pynvml.NVMLError_Timeout):
        api.nvmlEventSetWait(es, 1)
    bad = FakeNvml("h100x1")
    bad.init_error = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    with pytest.raises(pynvml.NVMLError_LibraryNotFound):
        bad.nvmlInit()


def test_models_and_units() -> None:
    api = _fake("h100x1,h200x1,a100x1")
    api.gpus[0].power_mw = 512_345
    api.gpus[0].energy_mj = 123_456_789
    api.gpus[0].used_mib = 1024
    sample = NvmlCollector(api).collect()
    assert sample.available
    assert sample.driver_version == "550.90.07"
    h100, h200, a100 = sample.gpus
    assert h100.name == "NVIDIA H100 80GB HBM3"
    assert h100.memory_total_bytes == 81559 * 1024 * 1024
    assert h100.memory_used_bytes == 1024 * 1024 * 1024
    assert h100.power_w == pytest.approx(512.345)  # mW -> W
    assert h100.energy_mj == 123_456_789  # mJ kept
    assert h100.uuid is not None
    assert h100.uuid.startswith("GPU-")
    assert h100.pci_bus_id == "00000000:18:00.0"
    assert h100.nvlink_active == [True] * 18
    assert h100.remapped_rows_failure is False
    assert h100.mig_mode == 0
    assert h100.sm_clock_mhz == 1980
    assert h200.name == "NVIDIA H200 141GB HBM3e"
    assert h200.memory_total_bytes == 144384 * 1024 * 1024
    assert a100.name == "NVIDIA A100-SXM4-80GB"
    assert a100.nvlink_active is not None
    assert len(a100.nvlink_active) == 12


def test_mixed_fleet_not_supported_is_absent_and_lost_gpu_is_unhealthy() -> None:
    api = _fake("h100x4,a100x4")
    api.set_unsupported(1, "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTotalEnergyConsumption")
    api.set_unsupported(5, "nvmlDeviceGetRemappedRows", "nvmlDeviceGetNvLinkState")
    api.gpus[6].mig_mode = 1  # utilisation is NotSupported on MIG-enabled GPUs
    api.lose(3)
    sample = NvmlCollector(api).collect()
    gpus = sample.gpus
    assert len(gpus) == 8
    assert gpus[1].power_w is None
    assert gpus[1].energy_mj is None
    assert gpus[1].temperature_c is not None
    assert gpus[1].healthy
    assert gpus[1].errors == {}
    assert gpus[5].remapped_rows_uncorrectable is None
    assert gpus[5].nvlink_active is None
    assert gpus[6].gpu_util_pct is None
    assert gpus[6].mig_mode == 1
    lost = gpus[3]
    assert lost.lost
    assert not lost.healthy
    assert "gpu_is_lost" in lost.unhealthy_reasons
    assert lost.uuid is None
    assert lost.power_w is None
    others = [g for g in gpus if g.index != 3]
    assert all(g.healthy for g in others)
    assert all(g.uuid for g in others)


def test_gpu_lost_midway_keeps_identity() -> None:
    api = _fake("h100x1")
    original = api.nvmlDeviceGetMemoryInfo

    def lose_then_fail(h: object) -> object:
        api.lose(0)
        return original(h)

    api.nvmlDeviceGetMemoryInfo = lose_then_fail  # type: ignore[method-assign]
    gpu = NvmlCollector(api).collect().gpus[0]
    assert gpu.uuid is not None
    assert gpu.lost
    assert gpu.memory_total_bytes is None


def test_other_errors_are_recorded_not_fatal() -> None:
    api = _fake("h100x1")

    def no_perm(h: object) -> int:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)

    api.nvmlDeviceGetTotalEnergyConsumption = no_perm  # type: ignore[method-assign]
    gpu = NvmlCollector(api).collect().gpus[0]
    assert gpu.energy_mj is None
    assert "energy" in gpu.errors
    assert gpu.power_w is not None


def test_not_initialised_reports_unavailable() -> None:
    sample = NvmlCollector(FakeNvml("h100x1")).collect()
    assert not sample.available
    assert sample.error


def test_xid_events_from_background_thread() -> None:
    api = _fake("h100x2")
    coll = NvmlCollector(api)
    watcher = XidWatcher(api, coll, wait_ms=20)
    watcher.start()
    try:
        api.inject_xid(1, 79)
        api.inject_xid(0, 13)
        deadline = time.monotonic() + 5
        while len(watcher.events) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        watcher.stop()
    events = watcher.drain()
    assert [e.xid for e in events] == [79, 13]
    sample = coll.collect()
    assert sample.gpus[1].last_xid == 79
    assert not sample.gpus[1].healthy
    assert "xid 79" in sample.gpus[1].unhealthy_reasons
    assert sample.gpus[0].last_xid == 13
    assert sample.gpus[0].healthy  # XID 13 is usually the application's fault


def test_parse_spec() -> None:
    assert parse_spec("h100x8") == ["h100"] * 8
    assert parse_spec("h200x2,a100x1") == ["h200", "h200", "a100"]
    with pytest.raises(ValueError, match="unknown GPU model"):
        parse_spec("v100x2")
