"""Issue 10.4: tearing a grant down cleans its GPUs and says whether they are clean.

The lease account's processes are ended through the host interface; NVML (the fake, with
``nvmlDeviceGetComputeRunningProcesses``) is asked whether anything still holds each GPU;
stragglers are killed by pid; clocks are reset; the result is in observed state."""

from __future__ import annotations

from pathlib import Path

from agents import protocol
from agents.host import FakeHost
from agents.node.access import FileAccess
from agents.node.apply import NodeApplier
from agents.node.cleaning import GpuCleaner
from agents.nvml.fake import FakeNvml
from agents.sysfs.faketree import FakeSysfsWriter, gpu_node_hcas
from agents.sysfs.infiniband import InfinibandCollector

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA alice@example.org"
GRANT = {"lease_id": "ls_42", "account": "lease-42", "gpu_indices": [2, 3],
         "ssh_authorized_keys": [KEY]}


def _node(tmp_path: Path, wait_s: float = 1.0) -> tuple[NodeApplier, FakeNvml, FakeHost]:
    writer = FakeSysfsWriter(tmp_path / "sys")
    for hca in gpu_node_hcas(1):
        writer.add(hca)
    api = FakeNvml("h100x8", host="gpu-node-01")
    api.nvmlInit()
    host = FakeHost()
    host.handlers.append(api.host_handler)
    access = FileAccess(tmp_path / "root", chown=False, host=host)
    cleaner = GpuCleaner(api, host, wait_s=wait_s, step_s=0.01)
    return NodeApplier(InfinibandCollector(tmp_path / "sys"), access, cleaner=cleaner), api, host


def _desired(generation: int, grants: list[dict[str, object]]) -> dict[str, object]:
    return {"protocol": 1, "node_id": "nd_1", "generation": generation,
            "issued_at": "2026-12-01T09:00:00+00:00", "partitions": [], "access_grants": grants}


def _report(observed: dict[str, object]) -> dict[str, object]:
    return {"protocol": 1, "node_id": "nd_1", "seq": 1, "created_at": "2026-12-01T09:00:00Z",
            "agent_version": "t", "dropped_reports": 0, "observed": observed, "telemetry": []}


def test_teardown_kills_lease_processes_and_reports_gpus_clean(tmp_path: Path) -> None:
    applier, api, host = _node(tmp_path)
    applier.apply(_desired(1, [GRANT]))
    api.add_process(2, pid=4242, owner="lease-42")
    api.add_process(3, pid=4243, owner="lease-42")
    api.add_process(3, pid=5151, owner="")  # e.g. a container's process, another user
    api.add_process(3, pid=5252, owner="", graphics=True)  # a graphics context counts too
    api.add_process(5, pid=6161, owner="lease-7")  # another lease's GPU: left alone
    applier.apply(_desired(2, []))
    assert ("pkill", "-KILL", "-u", "lease-42") in host.calls
    assert ("kill", "-KILL", "5151") in host.calls  # found by NVML on the lease's GPU
    assert ("kill", "-KILL", "5252") in host.calls
    assert ("kill", "-KILL", "6161") not in host.calls
    assert set(api.processes) == {6161}
    cleaning = applier.observed()["gpu_cleaning"]
    assert [(c["gpu_index"], c["clean"], c["processes"], c["killed"]) for c in cleaning] == [
        (2, True, [], []), (3, True, [], [5151, 5252])]
    assert cleaning[0]["gpu_uuid"] == api.gpus[2].uuid
    assert cleaning[0]["lease_id"] == "ls_42"
    assert cleaning[0]["reset"] == ["gpu_locked_clocks", "memory_locked_clocks",
                                    "applications_clocks"]
    assert [n["item"] for n in cleaning[0]["not_reset"]] == ["gpu_reset"]  # said, not done
    assert (2, "nvmlDeviceResetGpuLockedClocks") in api.resets
    assert protocol.validate_report(_report(applier.observed())) == []


def test_teardown_reports_gpu_not_clean_when_a_process_survives(tmp_path: Path) -> None:
    applier, api, _ = _node(tmp_path, wait_s=0.1)
    applier.apply(_desired(1, [GRANT]))
    api.add_process(2, pid=4242, owner="lease-42", unkillable=True)  # stuck in the driver
    api.set_unsupported(3, "nvmlDeviceResetMemoryLockedClocks",
                        "nvmlDeviceGetGraphicsRunningProcesses")  # compute still tells
    applier.apply(_desired(2, []))
    by_gpu = {c["gpu_index"]: c for c in applier.observed()["gpu_cleaning"]}
    assert by_gpu[2]["clean"] is False
    assert by_gpu[2]["processes"] == [4242]
    assert by_gpu[3]["clean"] is True
    assert {"item": "memory_locked_clocks", "reason": "NVML: Not Supported"} in (
        by_gpu[3]["not_reset"])
    assert applier.generation_applied == 2  # the grant is gone; the GPU is reported dirty


def test_gpu_not_clean_when_nvml_cannot_tell(tmp_path: Path) -> None:
    applier, api, _ = _node(tmp_path)
    applier.apply(_desired(1, [GRANT]))
    api.lose(2)
    applier.apply(_desired(2, []))
    by_gpu = {c["gpu_index"]: c for c in applier.observed()["gpu_cleaning"]}
    assert by_gpu[2]["clean"] is False
    assert by_gpu[2]["not_reset"][0]["item"] == "processes"


def test_cleaning_record_dropped_when_gpu_granted_again(tmp_path: Path) -> None:
    applier, _, _ = _node(tmp_path)
    applier.apply(_desired(1, [GRANT]))
    applier.apply(_desired(2, []))
    assert len(applier.observed()["gpu_cleaning"]) == 2
    applier.apply(_desired(3, [{**GRANT, "lease_id": "ls_43", "account": "lease-43",
                                "gpu_indices": [3]}]))
    assert [c["gpu_index"] for c in applier.observed()["gpu_cleaning"]] == [2]


def test_gpu_cleaning_validated_identically_on_both_sides() -> None:
    from portal.fleet import protocol as portal_protocol

    for item, problem in (({"gpu_index": 0, "clean": True}, None),
                          ({"gpu_index": 0}, "observed.gpu_cleaning[0].clean"),
                          ({"gpu_index": -1, "clean": False}, "observed.gpu_cleaning[0].gpu_index"),
                          ({"gpu_index": 0, "clean": "yes"}, "observed.gpu_cleaning[0].clean")):
        body = _report({"generation_applied": 0, "gpu_cleaning": [item]})
        problems = protocol.validate_report(body)
        assert problems == portal_protocol.validate_report(body)
        assert [p["field"] for p in problems] == ([problem] if problem else [])
