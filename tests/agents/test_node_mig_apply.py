"""Issue 28 on the node: the desired MIG layout is applied with ``agents.nvml.mig``
(fake NVML), the instances are reported with their MIG-… UUIDs, each MIG grant's account
gets ``CUDA_VISIBLE_DEVICES``, and tearing one tenant's grant down cleans only its own
instance — the other tenants' processes on the same GPU are never touched."""

from __future__ import annotations

from pathlib import Path

from agents import protocol
from agents.host import FakeHost
from agents.node.access import FakeAccess
from agents.node.apply import NodeApplier
from agents.node.cleaning import GpuCleaner
from agents.node.migapply import MigApplier
from agents.nvml.fake import FakeNvml
from agents.sysfs.faketree import FakeSysfsWriter, gpu_node_hcas
from agents.sysfs.infiniband import InfinibandCollector
from tests.agents.helpers import mig_desired


def _node(tmp_path: Path) -> tuple[NodeApplier, FakeNvml, FakeAccess]:
    writer = FakeSysfsWriter(tmp_path / "sys")
    for hca in gpu_node_hcas(1):
        writer.add(hca)
    api = FakeNvml("h100x8", host="gpu-node-01")
    api.nvmlInit()
    host = FakeHost()
    host.handlers.append(api.host_handler)
    access = FakeAccess()
    applier = NodeApplier(InfinibandCollector(tmp_path / "sys"), access,
                          cleaner=GpuCleaner(api, host, wait_s=0.2, step_s=0.01),
                          mig=MigApplier(api, host, sleep=lambda s: None))
    return applier, api, access



def test_the_layout_is_applied_and_reported_with_uuids(tmp_path: Path) -> None:
    applier, api, access = _node(tmp_path)
    desired = mig_desired(1, list(range(7)))
    assert protocol.validate_desired_state(desired, "node") == []
    applier.apply(desired)
    assert applier.errors == [] and applier.generation_applied == 1 and applier.converged()
    observed = applier.observed()
    (gpu,) = observed["mig"]
    assert gpu["gpu_index"] == 0 and gpu["mode"] == "enabled"
    assert [i["start"] for i in gpu["instances"]] == list(range(7))
    uuids = [i["uuid"] for i in gpu["instances"]]
    assert all(u.startswith("MIG-") for u in uuids) and len(set(uuids)) == 7
    env = dict(access.grants["lease-3"].environment)
    assert env["CUDA_VISIBLE_DEVICES"] == uuids[3]
    assert api.gpus[1].mig_mode == 0  # a GPU not in the layout is left alone


def test_a_torn_down_grant_cleans_only_its_own_instance(tmp_path: Path) -> None:
    applier, api, access = _node(tmp_path)
    applier.apply(mig_desired(1, [0, 1]))
    inst = {i.start: i for i in applier.mig.results[0].instances} if applier.mig else {}
    api.add_process(0, pid=100, owner="lease-0")
    api.processes[100].gpu_instance = inst[0].gpu_instance_id
    api.add_process(0, pid=101, owner="lease-1")  # another tenant, same GPU
    api.processes[101].gpu_instance = inst[1].gpu_instance_id
    applier.apply(mig_desired(2, [1]))
    assert "lease-0" in access.revoked and "lease-1" in access.grants
    assert 100 not in api.processes and 101 in api.processes  # never the neighbour
    assert applier.cleaning == {}  # the GPU was not cleaned whole
    assert [r["clean"] for r in applier.observed()["mig_cleaning"]] == [True]
    assert sorted(i.start for i in applier.mig.results[0].instances) == [1] \
        if applier.mig else False
    assert applier.converged()


def test_a_pending_reset_is_an_apply_error_and_not_converged(tmp_path: Path) -> None:
    applier, api, _ = _node(tmp_path)
    api.add_process(0, pid=7)  # a process on the whole GPU: the mode is not switched
    applier.apply(mig_desired(1, [0]))
    assert applier.generation_applied == 0 and not applier.converged()
    assert any(e["item"] == "mig/0" for e in applier.errors)


def test_an_agent_without_mig_support_says_so(tmp_path: Path) -> None:
    applier, _, _ = _node(tmp_path)
    applier.mig = None
    applier.apply(mig_desired(1, [0]))
    assert [e["item"] for e in applier.errors] == ["mig"]


def test_the_validator_refuses_a_bad_layout() -> None:
    bad = mig_desired(1, [0])
    bad["mig"][0]["instances"][0] = {"profile": "rm -rf", "start": 9}
    fields = {p["field"] for p in protocol.validate_desired_state(bad, "node")}
    assert fields == {"mig[0].instances[0].profile", "mig[0].instances[0].start"}


def test_a_gpu_left_without_instances_goes_back_to_whole_use(tmp_path: Path) -> None:
    applier, api, _ = _node(tmp_path)
    applier.apply(mig_desired(1, [0]))
    assert api.gpus[0].mig_mode == 1
    applier.apply(mig_desired(2, []))
    assert api.gpus[0].mig_mode == 0  # a whole-GPU lease placed here sees the GPU
    assert applier.errors == [] and applier.converged()
    assert applier.observed()["mig"][0]["mode"] == "disabled"
