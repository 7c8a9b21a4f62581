"""The agent's MIG manager (agents/nvml/mig.py) against the fake NVML: create/destroy at
placements, busy instances kept, pending-reset mode, and no orphan after a failure."""

from __future__ import annotations

import pynvml

from agents.nvml import mig
from agents.nvml.fake import FakeNvml


def _api(spec: str = "h100x2") -> FakeNvml:
    api = FakeNvml(spec, host="node-1")
    api.nvmlInit()
    return api


def _keys(result: mig.MigResult) -> list[tuple[str, int]]:
    return sorted(i.key for i in result.instances)


def test_profiles_come_from_nvml() -> None:
    api = _api()
    profiles = mig.gpu_profiles(api, api.nvmlDeviceGetHandleByIndex(0))
    assert profiles["3g.40gb"] == mig.Profile("3g.40gb", 9, 3, 4, (0, 4))
    assert profiles["1g.10gb"].starts == (0, 1, 2, 3, 4, 5, 6)


def test_reconcile_enables_mig_and_creates_the_layout() -> None:
    api = _api()
    layout = [("3g.40gb", 0), ("1g.10gb", 4), ("1g.10gb", 5), ("1g.10gb", 6)]
    result = mig.reconcile(api, 0, layout)
    assert result.mode == "enabled" and not result.errors
    assert _keys(result) == sorted(layout)
    assert all(i.compute_instance_id is not None and i.uuid and i.uuid.startswith("MIG-")
               for i in result.instances)
    assert len({i.uuid for i in result.instances}) == 4
    assert api.gpus[0].mig_mode == 1 and api.gpus[1].mig_mode == 0
    again = mig.reconcile(api, 0, layout)
    assert again.created == [] and again.destroyed == [] and _keys(again) == sorted(layout)


def test_reconcile_changes_a_layout_destroying_what_is_not_desired() -> None:
    api = _api()
    mig.reconcile(api, 0, [("3g.40gb", 0), ("3g.40gb", 4)])
    result = mig.reconcile(api, 0, [("7g.80gb", 0)])
    assert sorted(result.destroyed) == [("3g.40gb", 0), ("3g.40gb", 4)]
    assert result.created == [("7g.80gb", 0)] and _keys(result) == [("7g.80gb", 0)]
    assert mig.reconcile(api, 0, []).destroyed == [("7g.80gb", 0)]


def test_an_invalid_layout_changes_nothing() -> None:
    api = _api()
    for layout in ([("3g.40gb", 2)], [("1g.10gb", 7)], [("9g.90gb", 0)],
                   [("3g.40gb", 0), ("1g.10gb", 3)]):
        result = mig.reconcile(api, 0, layout)
        assert result.mode == "invalid" and result.errors, layout
    assert api.gpus[0].mig_mode == 0


def test_a_busy_instance_is_kept_and_reported() -> None:
    api = _api()
    first = mig.reconcile(api, 0, [("3g.40gb", 0), ("3g.40gb", 4)])
    busy = next(i for i in first.instances if i.start == 4)
    api.add_process(0, pid=42)
    api.processes[42].gpu_instance = busy.gpu_instance_id
    result = mig.reconcile(api, 0, [("4g.40gb", 0)])
    assert result.kept_busy == [("3g.40gb", 4)]
    assert result.destroyed == [("3g.40gb", 0)] and result.created == [("4g.40gb", 0)]
    assert next(i for i in result.instances if i.start == 4).busy
    assert 42 in api.processes  # never killed


def test_a_busy_instance_blocks_a_creation_on_its_slices_as_an_error() -> None:
    api = _api()
    first = mig.reconcile(api, 0, [("3g.40gb", 4)])
    api.add_process(0, pid=42)
    api.processes[42].gpu_instance = first.instances[0].gpu_instance_id
    result = mig.reconcile(api, 0, [("7g.80gb", 0)])
    assert result.kept_busy == [("3g.40gb", 4)] and result.created == []
    assert any("create 7g.80gb@0" in e for e in result.errors)


def test_mode_change_pending_reset_is_reported_and_nothing_created() -> None:
    api = _api("a100x1")
    api.add_process(0, pid=9)  # a whole-GPU tenant: the mode is not touched
    assert mig.reconcile(api, 0, [("7g.80gb", 0)]).mode == "busy"
    assert api.nvmlDeviceGetMigMode(api.nvmlDeviceGetHandleByIndex(0)) == [0, 0]
    api.nvmlDeviceSetMigMode(api.nvmlDeviceGetHandleByIndex(0), 1)  # someone asked: pending
    api.end_processes(pid=9)
    result = mig.reconcile(api, 0, [("7g.80gb", 0)])
    assert result.mode == "pending_reset" and result.created == []
    api.mig_reset(0)
    assert mig.reconcile(api, 0, [("7g.80gb", 0)]).created == [("7g.80gb", 0)]


def test_a_failed_compute_instance_leaves_no_orphan() -> None:
    api = _api()
    api.mig_fail_next("nvmlGpuInstanceCreateComputeInstance", pynvml.NVML_ERROR_UNKNOWN)
    result = mig.reconcile(api, 0, [("2g.20gb", 0), ("2g.20gb", 2)])
    assert len(result.errors) == 1 and "create 2g.20gb@0" in result.errors[0]
    assert _keys(result) == [("2g.20gb", 2)]  # the half-made one was rolled back
    assert mig.reconcile(api, 0, [("2g.20gb", 0), ("2g.20gb", 2)]).created == [("2g.20gb", 0)]


def test_a_half_made_instance_the_rollback_missed_is_reconciled() -> None:
    api = _api()
    api.mig_fail_next("nvmlGpuInstanceCreateComputeInstance", pynvml.NVML_ERROR_UNKNOWN)
    api.mig_fail_next("nvmlGpuInstanceDestroy", pynvml.NVML_ERROR_UNKNOWN)
    result = mig.reconcile(api, 0, [("3g.40gb", 0)])
    assert result.errors and [i.compute_instance_id for i in result.instances] == [None]
    repaired = mig.reconcile(api, 0, [("3g.40gb", 0)])  # desired: completed
    assert repaired.created == [("3g.40gb", 0)]
    assert repaired.instances[0].compute_instance_id is not None
    api.mig_fail_next("nvmlGpuInstanceCreateComputeInstance", pynvml.NVML_ERROR_UNKNOWN)
    api.mig_fail_next("nvmlGpuInstanceDestroy", pynvml.NVML_ERROR_UNKNOWN)
    mig.reconcile(api, 0, [("3g.40gb", 0), ("3g.40gb", 4)])
    cleaned = mig.reconcile(api, 0, [("3g.40gb", 0)])  # not desired: destroyed
    assert cleaned.destroyed == [("3g.40gb", 4)] and _keys(cleaned) == [("3g.40gb", 0)]


def test_a_failed_destroy_is_reported_and_retried() -> None:
    api = _api()
    mig.reconcile(api, 0, [("7g.80gb", 0)])
    api.mig_fail_next("nvmlGpuInstanceDestroy", pynvml.NVML_ERROR_UNKNOWN)
    result = mig.reconcile(api, 0, [("1g.10gb", 6)])
    assert any("destroy 7g.80gb@0" in e for e in result.errors)
    assert any("create 1g.10gb@6" in e for e in result.errors)  # slices still taken
    retry = mig.reconcile(api, 0, [("1g.10gb", 6)])
    assert retry.destroyed == [("7g.80gb", 0)] and _keys(retry) == [("1g.10gb", 6)]


def test_instances_report_memory_of_their_slices() -> None:
    api = _api()
    result = mig.reconcile(api, 1, [("1g.20gb", 6)])
    (inst,) = result.instances
    assert (inst.gpu_index, inst.size, inst.memory_used_bytes) == (1, 2, 0)
    assert inst.memory_total_bytes == 81559 * 2 // 8 * 1024 * 1024


def test_a_board_without_mig_is_unsupported() -> None:
    api = FakeNvml("h100x1", host="n")
    api.nvmlInit()
    api.gpus[0].model = type(api.gpus[0].model)("NVIDIA L40S", 0, 46068, 0, 350, 2520, 9001)
    assert mig.reconcile(api, 0, [("1g.10gb", 0)]).mode == "unsupported"


def test_when_nvml_cannot_list_processes_every_instance_counts_as_busy() -> None:
    api = _api()
    mig.reconcile(api, 0, [("7g.80gb", 0)])

    def refuse(h: object) -> list[object]:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)

    api.nvmlDeviceGetComputeRunningProcesses = refuse  # type: ignore[method-assign]
    result = mig.reconcile(api, 0, [("1g.10gb", 6)])
    assert result.kept_busy == [("7g.80gb", 0)] and result.destroyed == []
