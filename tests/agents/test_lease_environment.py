"""The lease account's NCCL/UCX environment (finding 11.5: nothing told the tenant which
HCA or P_Key index to use) and the wire checks on it and on ``index0``."""

from pathlib import Path

from agents import protocol
from agents.node.access import FileAccess, Grant

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHh7 alice@example"
NCCL = {"NCCL_IB_HCA": "=mlx5_0:1", "UCX_NET_DEVICES": "mlx5_0:1",
        "NCCL_SOCKET_IFNAME": "ib0.8101", "NCCL_IB_PKEY": "1"}


def _grant(env: dict[str, str]) -> dict[str, object]:
    return {"lease_id": "ls_42", "account": "lease-42", "ssh_authorized_keys": [KEY],
            "gpu_indices": [0], "gpu_uuids": ["GPU-aaa"], "environment": env}


def test_lease_account_environment_carries_nccl_variables(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    FileAccess(tmp_path, chown=False, terminate=lambda a: None).apply(
        Grant.from_wire(_grant(NCCL)))
    env = (tmp_path / "etc/gpupool/leases/lease-42.env").read_text().splitlines()
    assert "export CUDA_VISIBLE_DEVICES=GPU-aaa" in env
    for name, value in NCCL.items():
        assert f"export {name}={value}" in env


def test_unsafe_environment_is_refused_on_the_wire_and_dropped_by_the_agent() -> None:
    bad = {"NCCL_IB_HCA": "mlx5_0;rm -rf /", "lower": "x", "UCX_NET_DEVICES": "a b"}
    doc = {"protocol": protocol.PROTOCOL_VERSION, "node_id": "nd_1", "generation": 1,
           "issued_at": "2026-12-01T00:00:00+00:00", "access_grants": [_grant(bad)]}
    fields = {p["field"] for p in protocol.validate_desired_state(doc, "node")}
    assert fields == {f"access_grants[0].environment.{k}" for k in bad}
    assert Grant.from_wire(_grant(bad)).environment == ()


def test_index0_must_be_a_boolean_on_the_wire() -> None:
    doc = {"protocol": protocol.PROTOCOL_VERSION, "node_id": "", "generation": 1,
           "issued_at": "2026-12-01T00:00:00+00:00", "partitions": [
               {"name": "tenant_a", "pkey": "0x0101", "members": [
                   {"guid": "0x0000000000100009", "membership": "full", "index0": True},
                   {"guid": "0x000000000010000b", "membership": "full", "index0": "yes"}]}]}
    assert [p["field"] for p in protocol.validate_desired_state(doc, "fabric")] == [
        "partitions[0].members[1].index0"]
