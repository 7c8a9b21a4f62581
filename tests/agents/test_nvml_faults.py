"""The fake NVML's fault control file (issue 27): every line kind shows in the collector's
report the way the real NVML would show that fault; bad lines are skipped."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agents.host import HostCollector, write_fake_proc
from agents.nvml import binding
from agents.nvml.collector import NvmlCollector
from agents.nvml.fake import FakeNvml
from agents.nvml.faults import FaultFile
from agents.nvml.xid import XidWatcher
from agents.sysfs.faketree import FakeSysfsWriter, gpu_node_hcas
from agents.sysfs.infiniband import InfinibandCollector
from agents.telemetry import Sampler, to_wire


class Rig:
    def __init__(self, tmp: Path) -> None:
        writer = FakeSysfsWriter(tmp / "sys")
        for hca in gpu_node_hcas(1):
            writer.add(hca)
        write_fake_proc(tmp / "proc", "gpu-node-01")
        self.api = FakeNvml("h100x8", host="gpu-node-01")
        self.api.nvmlInit()
        self.nvml = NvmlCollector(self.api)
        self.sampler = Sampler(HostCollector(tmp / "proc"), InfinibandCollector(tmp / "sys"),
                               self.nvml)
        self.watcher = XidWatcher(self.api, self.nvml, wait_ms=50)
        self.watcher.start()
        self.sampler.xid_source = self.watcher.drain
        self.path = tmp / "faults.jsonl"
        self.faults = FaultFile(self.path, self.api, on_clear=self.nvml.forget)
        self.sampler.before_sample = self.faults.poll

    def append(self, *lines: Any) -> None:
        with self.path.open("a") as f:
            for line in lines:
                f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")

    def sample(self) -> dict[str, Any]:
        return to_wire(self.sampler.sample())

    def gpu(self, index: int) -> dict[str, Any]:
        return dict(self.sample()["gpus"][index])


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = Rig(tmp_path)
    yield r
    r.watcher.stop()


def test_healthy_fake_reports_the_new_fields_as_nvml_would(rig: Rig) -> None:
    gpu = rig.gpu(0)
    assert gpu["clocks_event_reasons"] == 0 and gpu["recovery_action"] == 0
    assert gpu["power_limit_w"] == 700.0
    assert gpu["remapped_rows_pending"] is False and gpu["remapped_rows_failure"] is False


def test_xid_line_goes_into_the_event_stream_of_the_same_sample(rig: Rig) -> None:
    rig.append({"gpu": 3, "xid": 79})
    sample = rig.sample()
    uuid = sample["gpus"][3]["uuid"]
    assert [(e["gpu_uuid"], e["xid"]) for e in sample["xid_events"]] == [(uuid, 79)]
    assert sample["xid_events"][0]["ts"] > 0
    assert sample["gpus"][3]["last_xid"] == 79 and sample["gpus"][3]["healthy"] is False
    assert rig.sample()["xid_events"] == []  # reported once


def test_lost_line_makes_nvml_raise_gpu_is_lost(rig: Rig) -> None:
    rig.append({"gpu": 3, "lost": True})
    rig.faults.poll()
    with pytest.raises(binding.GpuIsLost):
        rig.api.nvmlDeviceGetUUID(rig.api.nvmlDeviceGetHandleByIndex(3))
    gpu = rig.gpu(3)
    assert gpu["lost"] is True and gpu["healthy"] is False
    assert "gpu_is_lost" in gpu["unhealthy_reasons"]


def test_ecc_and_remap_lines(rig: Rig) -> None:
    rig.append({"gpu": 1, "ecc_dbe": 2}, {"gpu": 1, "ecc_dbe": 1},
               {"gpu": 2, "remap": "pending"}, {"gpu": 4, "remap": "failure"})
    sample = rig.sample()
    assert sample["gpus"][1]["ecc_uncorrected_volatile"] == 3
    assert sample["gpus"][2]["remapped_rows_pending"] is True
    assert sample["gpus"][2]["remapped_rows_failure"] is False
    assert sample["gpus"][4]["remapped_rows_failure"] is True


def test_thermal_and_power_brake_set_the_real_clocks_event_reason_bits(rig: Rig) -> None:
    rig.append({"gpu": 2, "thermal": True}, {"gpu": 5, "power_brake": True})
    sample = rig.sample()
    assert sample["gpus"][2]["clocks_event_reasons"] == 0x08 | 0x40  # HW + HW thermal
    assert sample["gpus"][5]["clocks_event_reasons"] == 0x08 | 0x80  # HW + HW power brake
    rig.append({"gpu": 2, "thermal": False})
    assert rig.gpu(2)["clocks_event_reasons"] == 0


def test_recovery_action_is_read_through_field_values(rig: Rig) -> None:
    rig.append({"gpu": 2, "recovery_action": 2})
    assert rig.gpu(2)["recovery_action"] == 2  # NVML_GPU_RECOVERY_ACTION_NODE_REBOOT


def test_clear_brings_a_gpu_back_to_healthy(rig: Rig) -> None:
    rig.append({"gpu": 2, "xid": 48}, {"gpu": 2, "lost": True}, {"gpu": 2, "ecc_dbe": 1},
               {"gpu": 2, "remap": "failure"}, {"gpu": 2, "thermal": True},
               {"gpu": 2, "recovery_action": 4})
    assert rig.gpu(2)["healthy"] is False
    rig.append({"gpu": 2, "clear": True})
    gpu = rig.gpu(2)
    assert gpu["healthy"] is True and not gpu.get("lost")
    assert gpu.get("last_xid") is None and gpu["ecc_uncorrected_volatile"] == 0
    assert gpu["remapped_rows_failure"] is False and gpu["clocks_event_reasons"] == 0
    assert gpu["recovery_action"] == 0


def test_bad_lines_are_skipped_and_only_new_lines_are_applied(rig: Rig) -> None:
    rig.append("not json", {"gpu": 99, "xid": 79}, {"gpu": 1}, {"gpu": 1, "xid": "79"},
               {"gpu": 1, "remap": "sideways"}, {"gpu": 1, "ecc_dbe": 1, "xid": 13}, [1],
               {"gpu": 1, "ecc_dbe": 1})
    assert rig.faults.poll() == 1
    assert rig.faults.skipped == 7
    assert rig.faults.poll() == 0  # nothing new: the ECC count is not added again
    assert rig.gpu(1)["ecc_uncorrected_volatile"] == 1
    with rig.path.open("a") as f:
        f.write('{"gpu": 1, "ecc_dbe": 5}')  # no newline yet: still being written
    assert rig.faults.poll() == 0
    with rig.path.open("a") as f:
        f.write("\n")
    assert rig.faults.poll() == 1 and rig.gpu(1)["ecc_uncorrected_volatile"] == 6


def test_not_supported_new_fields_are_absent_not_zero(rig: Rig) -> None:
    rig.api.set_unsupported(0, "nvmlDeviceGetCurrentClocksEventReasons",
                            "nvmlDeviceGetFieldValues", "nvmlDeviceGetEnforcedPowerLimit")
    gpu = rig.gpu(0)
    assert not {"clocks_event_reasons", "recovery_action", "power_limit_w"} & set(gpu)
    assert gpu["errors"] == {}
