import stat
from pathlib import Path

from agents.node.access import FileAccess, Grant
from agents.node.apply import NodeApplier
from agents.node.ipoib import FakeIpoib, SysfsIpoib, child_name
from agents.node.partitions import check_partitions, expected_pkeys
from agents.sysfs.faketree import FakeHca, FakePort, FakeSysfsWriter
from agents.sysfs.infiniband import InfinibandCollector

GUID = "0x0000000000100009"
OTHER = "0x000000000010000b"


def _tree(tmp_path: Path, pkeys: list[int]) -> InfinibandCollector:
    w = FakeSysfsWriter(tmp_path / "sys")
    w.add(FakeHca(name="mlx5_0", node_guid=0x100008,
                  ports=[FakePort(num=1, port_guid=0x100009, pkeys=pkeys)]))
    return InfinibandCollector(tmp_path / "sys")


DESIRED = {"generation": 3, "partitions": [
    {"name": "tenant_a", "pkey": "0x0101", "membership": "full", "ipoib": True,
     "port_guids": [GUID]},
    {"name": "storage", "pkey": "0x0200", "membership": "limited", "port_guids": [GUID, OTHER]},
    {"name": "tenant_b", "pkey": "0x0102", "membership": "full", "port_guids": [OTHER]},
]}


def test_expected_pkeys_membership_bit() -> None:
    assert expected_pkeys(DESIRED, GUID) == {0x8101, 0x0200}
    assert expected_pkeys(DESIRED, OTHER) == {0x8102, 0x0200}


def test_partition_check_in_sync_and_mismatch(tmp_path: Path) -> None:
    ok = check_partitions(_tree(tmp_path / "a", [0xFFFF, 0x8101, 0x0200]).collect(), DESIRED)
    assert ok == [{"device": "mlx5_0", "port": 1, "port_guid": GUID,
                   "pkeys": ["0xffff", "0x8101", "0x0200"], "missing": [], "unexpected": [],
                   "in_sync": True}]
    # SM has not yet added A's key, and the port still holds B's key: both reported
    bad = check_partitions(_tree(tmp_path / "b", [0x7FFF, 0x8102, 0x0200]).collect(), DESIRED)
    assert bad[0]["missing"] == ["0x8101"]
    assert bad[0]["unexpected"] == ["0x8102"]
    assert not bad[0]["in_sync"]
    # limited where full is expected is a mismatch too
    lim = check_partitions(_tree(tmp_path / "c", [0xFFFF, 0x0101, 0x0200]).collect(), DESIRED)
    assert lim[0]["missing"] == ["0x8101"]
    assert lim[0]["unexpected"] == ["0x0101"]


def test_sysfs_ipoib_create_child(tmp_path: Path) -> None:
    w = FakeSysfsWriter(tmp_path)
    w.add_netdev("ib0")
    w.add_netdev("ib0.8101", pkey=0x8101, parent="ib0")
    mgr = SysfsIpoib(tmp_path)
    assert mgr.children("ib0") == {"ib0.8101": 0x8101}
    assert mgr.create("ib0", 0x0102) == "ib0.8102"
    assert (tmp_path / "class/net/ib0/create_child").read_text() == "0x8102\n"
    mgr.remove("ib0", 0x0101)
    assert (tmp_path / "class/net/ib0/delete_child").read_text() == "0x8101\n"
    assert child_name("ib0", 0x0101) == "ib0.8101"


def test_applier_ipoib_only_for_local_ports(tmp_path: Path) -> None:
    ib = _tree(tmp_path, [0xFFFF])
    fake = FakeIpoib()
    applier = NodeApplier(ib, access=_NoAccess(), ipoib=fake)
    applier.apply(DESIRED)
    assert fake.children("ib0") == {"ib0.8101": 0x8101}  # not 0x0102 (other node), not storage
    assert applier.generation_applied == 3
    applier.apply({**DESIRED, "generation": 2})  # stale generation: ignored
    assert applier.generation_applied == 3
    applier.apply({"generation": 4, "partitions": []})
    assert fake.children("ib0") == {}


class _NoAccess:
    def present(self) -> dict[str, str]:
        return {}

    def apply(self, grant: Grant) -> None:
        raise PermissionError("read-only root")

    def revoke(self, account: str) -> None:
        return None


def test_apply_error_keeps_generation(tmp_path: Path) -> None:
    applier = NodeApplier(_tree(tmp_path, [0xFFFF]), access=_NoAccess())
    applier.apply({"generation": 5, "partitions": [], "access_grants": [
        {"lease_id": "ls_1", "account": "lease-1", "gpu_indices": [0]}]})
    obs = applier.observed()
    assert obs["generation_applied"] == 0
    assert obs["generation_seen"] == 5
    assert obs["apply_errors"][0]["item"] == "access_grants/lease-1"


KEY_A = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA alice@example.org"
KEY_B = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ bob@example.org"


def test_file_access_grant_and_revoke(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/bash\n"
                                     "alice:x:1000:1000::/home/alice:/bin/bash\n")
    killed: list[str] = []
    access = FileAccess(root, chown=False, terminate=killed.append)
    grant = Grant("ls_42", "lease-42", (KEY_A, KEY_B), (2, 3), ("GPU-aaa", "GPU-bbb"))
    access.apply(grant)
    access.apply(grant)  # idempotent
    passwd = (root / "etc/passwd").read_text().splitlines()
    assert passwd[:2] == ["root:x:0:0:root:/root:/bin/bash", "alice:x:1000:1000::/home/alice:/bin/bash"]
    assert passwd[2] == "lease-42:x:61000:61000:gpupool-lease ls_42:/home/lease-42:/bin/bash"
    assert len(passwd) == 3
    assert (root / "etc/shadow").read_text().startswith("lease-42:!:")  # key-only login
    keys = root / "home/lease-42/.ssh/authorized_keys"
    assert keys.read_text() == f"{KEY_A}\n{KEY_B}\n"
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600
    assert stat.S_IMODE(keys.parent.stat().st_mode) == 0o700
    env = (root / "etc/gpupool/leases/lease-42.env").read_text()
    assert "export CUDA_VISIBLE_DEVICES=GPU-aaa,GPU-bbb\n" in env
    assert "export NVIDIA_VISIBLE_DEVICES=GPU-aaa,GPU-bbb\n" in env
    assert "gpupool/leases/$(id -un).env" in (root / "etc/profile.d/gpupool-lease.sh").read_text()
    assert (root / "etc/gpupool/leases/lease-42.devices").read_text() == (
        "c 195:2 rw\nc 195:3 rw\nc 195:255 rw\n")
    dropin = (root / "etc/systemd/system/user-61000.slice.d/50-gpupool.conf").read_text()
    assert "DevicePolicy=closed" in dropin
    assert "DeviceAllow=/dev/nvidia2 rw" in dropin
    assert "DeviceAllow=/dev/nvidia0 rw" not in dropin
    assert access.present() == {"lease-42": "ls_42"}

    # a second lease on the same (shared) node gets its own account and GPUs
    access.apply(Grant("ls_43", "lease-43", (KEY_B,), (0,)))
    assert "CUDA_VISIBLE_DEVICES=0\n" in (root / "etc/gpupool/leases/lease-43.env").read_text()
    assert access.present() == {"lease-42": "ls_42", "lease-43": "ls_43"}

    access.revoke("lease-42")
    assert killed == ["lease-42"]
    assert not (root / "home/lease-42").exists()
    assert not (root / "etc/gpupool/leases/lease-42.env").exists()
    assert not (root / "etc/systemd/system/user-61000.slice.d").exists()
    assert "lease-42" not in (root / "etc/passwd").read_text()
    assert "lease-42" not in (root / "etc/shadow").read_text()
    assert access.present() == {"lease-43": "ls_43"}
    access.revoke("alice")  # never touches accounts it did not create
    assert "alice" in (root / "etc/passwd").read_text()
    assert killed == ["lease-42"]
