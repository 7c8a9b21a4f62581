"""Cleaning one MIG instance between tenants, then verifying it (issue 28).

A MIG instance is another tenant's next GPU, so it is handed over as a new instance: the
processes still in it are killed by pid (bounded wait until NVML lists none), then the GPU
instance is destroyed and made again at the same placement with its compute instance (a
fresh instance: nothing of the old one's compute state survives; ids and the ``MIG-…``
UUID may come back the same), and the result is checked: the instance is there, complete,
and nothing runs or holds memory in it. ``clean`` is true only then. The GPU's other
instances are not touched.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agents.host import HostCommands
from agents.nvml import binding, mig


def _pids_in(api: Any, handle: Any, gpu_instance_id: int) -> list[int]:
    procs: list[Any] = []
    for fn in (api.nvmlDeviceGetComputeRunningProcesses,
               api.nvmlDeviceGetGraphicsRunningProcesses):
        procs += fn(handle)
    return sorted({int(p.pid) for p in procs if int(p.gpuInstanceId) == gpu_instance_id})


def _drain(api: Any, handle: Any, gi_id: int, host: HostCommands, wait_s: float,
           sleep: Callable[[float], None]) -> tuple[list[int], list[int]]:
    killed = _pids_in(api, handle, gi_id)
    for pid in killed:
        host.run(["kill", "-KILL", str(pid)])
    deadline = time.monotonic() + wait_s
    left = _pids_in(api, handle, gi_id)
    while left and time.monotonic() < deadline:
        sleep(0.05)
        left = _pids_in(api, handle, gi_id)
    return killed, left


def _verify(api: Any, handle: Any, index: int,
            key: tuple[str, int]) -> tuple[bool, mig.MigInstance | None]:
    now = next((i for i in mig.list_instances(api, handle, index) if i.key == key), None)
    ok = (now is not None and now.compute_instance_id is not None and not now.busy
          and now.memory_used_bytes == 0 and now.uuid is not None)
    return ok, now


def clean_instance(api: Any, host: HostCommands, index: int, gpu_instance_id: int,
                   wait_s: float = 5.0,
                   sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """Clean GPU instance ``gpu_instance_id`` of GPU ``index``; the result says how."""
    result: dict[str, Any] = {"gpu_index": index, "gpu_instance_id": gpu_instance_id,
                              "clean": False, "killed": [], "processes": [], "errors": []}
    try:
        handle = api.nvmlDeviceGetHandleByIndex(index)
        old = next(i for i in mig.list_instances(api, handle, index)
                   if i.gpu_instance_id == gpu_instance_id)
    except (binding.NVMLError, StopIteration):
        result["errors"].append("no such MIG instance")
        return result
    result.update(profile=old.profile, start=old.start)
    try:
        result["killed"], result["processes"] = _drain(api, handle, gpu_instance_id, host,
                                                       wait_s, sleep)
    except binding.NVMLError as exc:
        result["errors"].append(f"processes unreadable: {exc}: not recreated")
        return result
    if result["processes"]:
        result["errors"].append("processes still run in the instance: not recreated")
        return result
    done = mig.recreate(api, handle, old)
    result["errors"] += done
    ok, now = _verify(api, handle, index, old.key)
    result["clean"] = ok and not done
    if now is not None:
        result.update(gpu_instance_id=now.gpu_instance_id, mig_uuid=now.uuid)
    return result
