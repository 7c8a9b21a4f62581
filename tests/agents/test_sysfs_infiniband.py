import os
from pathlib import Path

import pytest

from agents.sysfs.infiniband import (
    IbDevice,
    IbPort,
    InfinibandCollector,
    gid_to_guid,
    parse_rate,
    parse_state,
)


def _port(devs: list[IbDevice], dev: str, num: int) -> IbPort:
    return next(p for d in devs if d.name == dev for p in d.ports if p.port == num)


def test_node_exporter_tree(node_exporter_sys: Path) -> None:
    devs = InfinibandCollector(node_exporter_sys).collect()
    assert [d.name for d in devs] == ["i40iw0", "mlx4_0"]
    mlx = devs[1]
    assert (mlx.board_id, mlx.fw_ver, mlx.hca_type) == ("SM_1141000001000", "2.31.5050", "MT4099")
    p1 = _port(devs, "mlx4_0", 1)
    assert p1.state_id == 4
    assert p1.state == "ACTIVE"
    assert p1.phys_state_id == 5
    assert p1.phys_state == "LinkUp"
    assert p1.rate_gbps == 40.0
    assert p1.link_width == "4X"
    assert p1.link_speed == "QDR"
    assert p1.link_layer == "InfiniBand"
    # x4: data counters are 4-octet words
    assert p1.counters["port_rcv_data"] == 4631917
    assert p1.data_bytes("port_rcv_data") == 18527668
    assert p1.data_bytes("port_xmit_data") == 14933760
    # 64-bit device (a packet counter above 2^32), but port_xmit_wait is 32-bit: stuck
    assert p1.extended
    assert p1.saturated == ["port_xmit_wait"]
    assert p1.counters_ext["port_rcv_data_64"] == 4631917
    assert p1.pkeys is None
    assert p1.port_guid is None


def test_no_pma_device_is_survived(node_exporter_sys: Path) -> None:
    devs = InfinibandCollector(node_exporter_sys).collect()
    p = _port(devs, "i40iw0", 1)
    assert p.counters == {}
    assert p.unavailable["port_xmit_data"] == "N/A (no PMA)"
    assert len(p.unavailable) == 17
    assert p.rate_gbps == 10.0
    assert p.link_speed is None
    assert p.saturated == []
    assert p.data_bytes("port_xmit_data") is None


def test_procfs_tree_quirks(procfs_sys: Path) -> None:
    devs = InfinibandCollector(procfs_sys).collect()
    assert [d.name for d in devs] == ["hfi1_0", "mlx4_0", "mlx5_0"]
    mlx5 = devs[2]
    assert mlx5.node_guid == "0a7f:bc12:45ef:d23b"
    p = mlx5.ports[0]
    assert p.phys_state_id == 4
    assert p.phys_state == "ACTIVE"
    assert p.rate_gbps == 25.0
    assert p.link_width == "1X"
    assert p.hw_counters["rx_read_requests"] == 175528982
    assert p.hw_counters["duplicate_request"] == 41
    assert p.counters["port_xmit_data"] == 2880761508848
    assert p.data_bytes("port_xmit_data") == 2880761508848 * 4
    assert p.extended
    assert p.saturated == []
    assert _port(devs, "mlx4_0", 2).link_layer == "InfiniBand"  # extra blank line stripped
    hfi = devs[0]
    assert hfi.hca_type is None  # file absent: absent, not a crash


def test_failing_reads_are_survived(procfs_sys: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = procfs_sys / "class/infiniband/mlx5_0/ports/1/counters/symbol_error"
    real_read = Path.read_text

    def failing(self: Path, *a: object, **k: object) -> str:
        if self == target:
            raise OSError(22, "Invalid argument")
        if self.name == "fw_ver":
            raise PermissionError(13, "denied")
        return real_read(self, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", failing)
    devs = InfinibandCollector(procfs_sys).collect()
    p = _port(devs, "mlx5_0", 1)
    assert "symbol_error" not in p.counters
    assert p.unavailable["symbol_error"] == "EINVAL"
    assert p.counters["link_downed"] == 0
    assert all(d.fw_ver is None for d in devs)


def test_missing_root(tmp_path: Path) -> None:
    assert InfinibandCollector(tmp_path / "nothing").collect() == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("200 Gb/sec (4X HDR)", (200.0, "4X", "HDR")),
        ("10 Gb/sec (4X)", (10.0, "4X", None)),
        ("2.5 Gb/sec (1X SDR)", (2.5, "1X", "SDR")),
        ("400 Gb/sec (4X NDR)", (400.0, "4X", "NDR")),
        ("56 Gb/sec (4X FDR)", (56.0, "4X", "FDR")),
        ("garbage", (None, None, None)),
        (None, (None, None, None)),
    ],
)
def test_parse_rate(text: str | None, expected: tuple[object, ...]) -> None:
    assert parse_rate(text) == expected


def test_parse_state_and_guid() -> None:
    assert parse_state("4: ACTIVE") == (4, "ACTIVE")
    assert parse_state("5: LinkUp") == (5, "LinkUp")
    assert parse_state("") == (None, None)
    assert gid_to_guid("fe80:0000:0000:0000:ec0d:9a03:0078:a8b2") == "0xec0d9a030078a8b2"
    assert gid_to_guid("0000:0000:0000:0000:0000:0000:0000:0000") is None
    assert gid_to_guid("bogus") is None


def test_unreadable_dir_entries(tmp_path: Path) -> None:
    base = tmp_path / "class/infiniband/mlx5_0/ports/1"
    (base / "counters").mkdir(parents=True)
    (base / "counters/port_xmit_data").write_text("oops\n")
    (base / "pkeys").mkdir()
    (base / "pkeys/0").write_text("0xffff\n")
    (base / "pkeys/1").write_text("0x0000\n")
    (base / "pkeys/2").write_text("0x8101\n")
    os.symlink("nowhere", base / "counters/dangling")
    devs = InfinibandCollector(tmp_path).collect()
    p = devs[0].ports[0]
    assert p.pkeys == ["0xffff", "0x8101"]
    assert p.unavailable["port_xmit_data"].startswith("unparsable")
    assert p.unavailable["dangling"] == "ENOENT"


def test_partitions_view_reads_only_what_partition_checks_need(
        node_exporter_sys: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The convergence watch re-reads this every step (issue 12): the port GUID, link
    layer and P_Key table as ``collect`` has them, and no counters."""
    ib = InfinibandCollector(node_exporter_sys)
    full = ib.collect()

    def no_counters(*args: object) -> dict[str, int]:
        raise AssertionError("counters read for a partition check")

    monkeypatch.setattr("agents.sysfs.infiniband._read_dir", no_counters)
    view = ib.partitions_view()
    assert [d.name for d in view] == [d.name for d in full]
    assert [(p.device, p.port, p.port_guid, p.link_layer, p.pkeys)
            for d in view for p in d.ports] == [
        (p.device, p.port, p.port_guid, p.link_layer, p.pkeys) for d in full for p in d.ports]
