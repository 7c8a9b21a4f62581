"""Issue 28, isolation across tenants on the node: a MIG grant's device cgroup allows the
parent ``/dev/nvidiaN`` (CUDA needs it) plus only its own instance's GPU-instance and
compute-instance capability nodes (``/dev/nvidia-caps/nvidia-capN``), read from the
driver's capability files as the fake NVML publishes them in the driver's format; never
another tenant's, and a released instance's nodes go with its grant."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.host import FakeHost
from agents.node.access import FileAccess
from agents.node.apply import NodeApplier
from agents.node.migapply import MigApplier
from agents.nvml import fakecaps
from agents.nvml.fake import FakeNvml
from agents.nvml.migcaps import MigCapabilities, parse_caps_major, parse_minor
from agents.sysfs.faketree import FakeSysfsWriter, gpu_node_hcas
from agents.sysfs.infiniband import InfinibandCollector
from tests.agents.helpers import mig_desired

# /proc/driver/nvidia/capabilities/gpu0/mig/gi1/access on a real H100 (MIG user guide)
REAL_ACCESS = "DeviceFileMinor: 12\nDeviceFileMode: 292\nDeviceFileModify: 1\n"


def test_the_drivers_access_file_and_proc_devices_are_read() -> None:
    assert parse_minor(REAL_ACCESS) == 12
    devices = "Character devices:\n  1 mem\n195 nvidia\n237 nvidia-caps\n" \
              "238 nvidia-caps-imex-channels\n\nBlock devices:\n237 not-this\n"
    assert parse_caps_major(devices) == 237
    with pytest.raises(ValueError):
        parse_minor("DeviceFileMode: 292\n")
    with pytest.raises(ValueError):
        parse_caps_major("Character devices:\n195 nvidia\n")


def test_fake_minors_follow_the_drivers_mig_minors_table() -> None:
    # gi1 -> 12 (the guide), GI 2 / CI 0 -> 22 and GI 3 / CI 0 -> 31 (a real listing),
    # and gpu1/gi0/access -> 138 (15 GPU instances x 9 per GPU, from 3)
    assert fakecaps.minor_of(0, 1) == 12
    assert fakecaps.minor_of(0, 2, 0) == 22 and fakecaps.minor_of(0, 3, 0) == 31
    assert fakecaps.minor_of(1, 0) == 138


def _node(tmp_path: Path) -> tuple[NodeApplier, FakeNvml, FileAccess, FakeHost]:
    writer = FakeSysfsWriter(tmp_path / "sys")
    for hca in gpu_node_hcas(1):
        writer.add(hca)
    api = FakeNvml("h100x8", host="gpu-node-01")
    api.nvmlInit()
    api.attach_caps(tmp_path / "proc")
    host = FakeHost()
    host.handlers.append(api.host_handler)
    access = FileAccess(tmp_path / "root", host=host)
    mig = MigApplier(api, host, sleep=lambda s: None, caps=MigCapabilities(tmp_path / "proc"))
    return NodeApplier(InfinibandCollector(tmp_path / "sys"), access, mig=mig), api, access, host



def _own_minors(applier: NodeApplier, start: int) -> list[int]:
    assert applier.mig is not None
    (inst,) = [i for i in applier.mig.results[0].instances if i.start == start]
    assert inst.compute_instance_id is not None
    return sorted([fakecaps.minor_of(0, inst.gpu_instance_id),
                   fakecaps.minor_of(0, inst.gpu_instance_id, inst.compute_instance_id)])


def _dropin(root: Path, account: str) -> str:
    uid = next(line.split(":")[2] for line in (root / "etc/passwd").read_text().splitlines()
               if line.startswith(account + ":"))
    return (root / f"etc/systemd/system/user-{uid}.slice.d/50-gpupool.conf").read_text()


def test_two_tenants_on_one_gpu_each_reach_only_their_own_instance(tmp_path: Path) -> None:
    applier, _, access, host = _node(tmp_path)
    applier.apply(mig_desired(1, [0, 1]))
    assert applier.errors == [] and applier.converged()
    a, b = _own_minors(applier, 0), _own_minors(applier, 1)
    assert not set(a) & set(b)
    assert access.cap_minors("lease-0") == a and access.cap_minors("lease-1") == b
    assert access.gpu_indices("lease-0") == [0]  # cap minors are not GPU indices
    allow = (tmp_path / "root/etc/gpupool/leases/lease-0.devices").read_text().splitlines()
    assert allow == ["c 195:0 rw", "c 195:255 rw",
                     *(f"c {fakecaps.FAKE_CAPS_MAJOR}:{m} r" for m in a)]
    dropin = _dropin(tmp_path / "root", "lease-0")
    assert "DevicePolicy=closed" in dropin and "DeviceAllow=/dev/nvidia0 rw" in dropin
    assert "DeviceAllow=/dev/nvidiactl rw" in dropin
    assert [ln for ln in dropin.splitlines() if "nvidia-caps" in ln] == \
        [f"DeviceAllow=/dev/nvidia-caps/nvidia-cap{m} r" for m in a]
    made = {c[2] for c in host.calls if c[:2] == ("nvidia-modprobe", "-f")}
    assert f"/proc/driver/nvidia/capabilities/gpu0/mig/gi{(a[0] - 3) // 9}/access" in made


def test_a_released_instance_takes_its_capability_nodes_with_it(tmp_path: Path) -> None:
    applier, _, access, _ = _node(tmp_path)
    applier.apply(mig_desired(1, [0, 1]))
    b = _own_minors(applier, 1)
    applier.apply(mig_desired(2, [1]))
    assert applier.errors == []
    assert "lease-0" not in access.present() and access.cap_minors("lease-0") == []
    assert not (tmp_path / "root/etc/gpupool/leases/lease-0.devices").exists()
    assert access.cap_minors("lease-1") == b  # the neighbour keeps exactly its own
    # the instance is gone from the driver's tree too: nothing left for it to point at
    caps = tmp_path / "proc/driver/nvidia/capabilities/gpu0/mig"
    assert len([p for p in caps.iterdir() if p.name.startswith("gi")]) == 1


def test_an_instance_lost_under_a_grant_loses_its_nodes(tmp_path: Path) -> None:
    applier, api, access, _ = _node(tmp_path)
    applier.apply(mig_desired(1, [0]))
    assert access.cap_minors("lease-0") != []
    api.mig_reset(0)  # the GPU was reset: every instance gone
    applier.mig.results.clear()  # type: ignore[union-attr]
    api.mig_fail_next("nvmlDeviceCreateGpuInstanceWithPlacement", 2)  # not made again
    applier.apply(mig_desired(2, [0]))
    assert access.cap_minors("lease-0") == []  # never a stale node of a gone instance
    env = (tmp_path / "root/etc/gpupool/leases/lease-0.env").read_text()
    assert "MIG-" not in env


def test_unreadable_capability_files_grant_nothing(tmp_path: Path) -> None:
    applier, _, access, _ = _node(tmp_path)
    assert applier.mig is not None
    applier.mig.caps = MigCapabilities(tmp_path / "no-driver-tree")  # fail closed
    applier.apply(mig_desired(1, [0]))
    assert any(e["item"] == "access_grants/lease-0" for e in applier.errors)
    assert "lease-0" not in access.present() and not applier.converged()
