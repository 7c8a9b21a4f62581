"""Cleaning one MIG instance between tenants (agents/nvml/migclean.py), against the fake."""

from __future__ import annotations

import pynvml

from agents.host import FakeHost
from agents.nvml import mig
from agents.nvml.fake import FakeNvml
from agents.nvml.migclean import clean_instance


def _setup() -> tuple[FakeNvml, FakeHost, list[mig.MigInstance]]:
    api = FakeNvml("h100x1", host="n")
    api.nvmlInit()
    host = FakeHost()
    host.handlers.append(api.host_handler)
    result = mig.reconcile(api, 0, [("3g.40gb", 0), ("3g.40gb", 4)])
    return api, host, result.instances


def _run_in(api: FakeNvml, inst: mig.MigInstance, pid: int, **kw: object) -> None:
    api.add_process(0, pid=pid, used_mib=512, **kw)  # type: ignore[arg-type]
    api.processes[pid].gpu_instance = inst.gpu_instance_id


def test_an_instance_is_drained_recreated_and_verified() -> None:
    api, host, (first, second) = _setup()
    _run_in(api, first, 11)
    _run_in(api, second, 22)  # another tenant's, in the other instance
    handle = api.nvmlDeviceGetHandleByIndex(0)
    old_gi = api.nvmlDeviceGetGpuInstanceById(handle, first.gpu_instance_id)
    kept_gi = api.nvmlDeviceGetGpuInstanceById(handle, second.gpu_instance_id)
    result = clean_instance(api, host, 0, first.gpu_instance_id, sleep=lambda s: None)
    assert result["clean"] and result["killed"] == [11] and not result["errors"]
    assert result["mig_uuid"].startswith("MIG-")
    assert (result["profile"], result["start"]) == ("3g.40gb", 0)
    assert 22 in api.processes and 11 not in api.processes
    assert host.calls == [("kill", "-KILL", "11")]
    assert old_gi.destroyed and not kept_gi.destroyed  # made anew; the neighbour untouched
    after = {i.start: i for i in mig.list_instances(api, api.nvmlDeviceGetHandleByIndex(0), 0)}
    assert after[4].uuid == second.uuid and after[0].uuid == result["mig_uuid"]


def test_an_unkillable_process_leaves_the_instance_unclean_and_in_place() -> None:
    api, host, (first, _) = _setup()
    _run_in(api, first, 11, unkillable=True)
    result = clean_instance(api, host, 0, first.gpu_instance_id, wait_s=0.0,
                            sleep=lambda s: None)
    assert not result["clean"] and result["processes"] == [11]
    now = mig.list_instances(api, api.nvmlDeviceGetHandleByIndex(0), 0)
    assert first.uuid in {i.uuid for i in now}  # not destroyed under the process


def test_a_failed_recreation_is_not_clean_and_the_next_reconcile_repairs_it() -> None:
    api, host, (first, _) = _setup()
    api.mig_fail_next("nvmlDeviceCreateGpuInstanceWithPlacement", pynvml.NVML_ERROR_UNKNOWN)
    result = clean_instance(api, host, 0, first.gpu_instance_id, sleep=lambda s: None)
    assert not result["clean"] and result["errors"]
    again = mig.reconcile(api, 0, [("3g.40gb", 0), ("3g.40gb", 4)])
    assert again.created == [("3g.40gb", 0)] and len(again.instances) == 2


def test_an_unknown_instance_is_reported() -> None:
    api, host, _ = _setup()
    assert clean_instance(api, host, 0, 99)["errors"] == ["no such MIG instance"]


def test_unreadable_processes_leave_the_instance_unclean_and_in_place() -> None:
    api, host, (first, _) = _setup()

    def refuse(h: object) -> list[object]:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)

    api.nvmlDeviceGetComputeRunningProcesses = refuse  # type: ignore[method-assign]
    result = clean_instance(api, host, 0, first.gpu_instance_id, sleep=lambda s: None)
    assert not result["clean"] and "processes unreadable" in result["errors"][0]
    assert first.uuid in {i.uuid for i in mig.list_instances(api, api.gpus[0], 0)}
