from pathlib import Path

from agents.sysfs.faketree import FakeHca, FakePort, FakeSysfsWriter, format_rate
from agents.sysfs.infiniband import InfinibandCollector
from agents.sysfs.rates import RateTracker, counter_rate


def test_counter_rate_rules() -> None:
    # data counters: words -> bytes/s
    assert counter_rate("port_xmit_data", 100, 350, 10.0, False) == (100.0, None)
    # saturated 32-bit counter: unknown, never a (wrong) number
    assert counter_rate("port_xmit_data", 100, 2**32 - 1, 10.0, False) == (None, "saturated")
    assert counter_rate("port_xmit_data", 100, 2**32 - 1, 10.0, True)[0] is not None
    assert counter_rate("symbol_error", 5, 65535, 1.0, True) == (None, "saturated")
    assert counter_rate("link_downed", 255, 3, 1.0, True) == (None, "reset")
    # reset (driver reload)
    assert counter_rate("port_rcv_packets", 1000, 10, 1.0, True) == (None, "reset")
    assert counter_rate("port_rcv_packets", 1, 2, 0.0, True) == (None, "no_interval")


def _writer(tmp_path: Path, extended: bool) -> FakeSysfsWriter:
    w = FakeSysfsWriter(tmp_path)
    w.add(FakeHca(name="mlx5_0", node_guid=0x100, extended=extended,
                  ports=[FakePort(num=1, port_guid=0x101, lid=5)]))
    return w


def test_rates_from_fake_tree(tmp_path: Path) -> None:
    w = _writer(tmp_path, extended=False)
    coll = InfinibandCollector(tmp_path)
    tracker = RateTracker()
    assert tracker.update(coll.collect(), 0.0) == {}
    w.bump("mlx5_0", 1, port_xmit_data=250, port_rcv_packets=30, symbol_error=70000)
    rates = tracker.update(coll.collect(), 10.0)[("mlx5_0", 1)]
    assert rates.per_second["port_xmit_bytes"] == 100.0
    assert rates.per_second["port_rcv_packets"] == 3.0
    assert rates.unknown["symbol_error"] == "saturated"
    # 32-bit data counter hits its max: sticks, rate unknown
    w.bump("mlx5_0", 1, port_xmit_data=2**33)
    rates = tracker.update(coll.collect(), 20.0)[("mlx5_0", 1)]
    assert "port_xmit_bytes" not in rates.per_second
    assert rates.unknown["port_xmit_bytes"] == "saturated"
    port = coll.collect()[0].ports[0]
    assert "port_xmit_data" in port.saturated
    assert "symbol_error" in port.saturated
    assert port.data_bytes("port_xmit_data") is None


def test_reset_then_recovers(tmp_path: Path) -> None:
    w = _writer(tmp_path, extended=True)
    coll = InfinibandCollector(tmp_path)
    tracker = RateTracker()
    w.bump("mlx5_0", 1, port_rcv_data=1000)
    tracker.update(coll.collect(), 0.0)
    w.hcas["mlx5_0"].ports[0].counters["port_rcv_data"] = 10  # driver reload
    w.write("mlx5_0")
    assert tracker.update(coll.collect(), 1.0)[("mlx5_0", 1)].unknown["port_rcv_bytes"] == "reset"
    w.bump("mlx5_0", 1, port_rcv_data=5)
    assert tracker.update(coll.collect(), 2.0)[("mlx5_0", 1)].per_second["port_rcv_bytes"] == 20


def test_writer_follows_kernel_formats(tmp_path: Path) -> None:
    w = _writer(tmp_path, extended=True)
    w.set_pkeys("mlx5_0", 1, [0xFFFF, 0x8101])
    p = tmp_path / "class/infiniband/mlx5_0"
    assert (p / "node_guid").read_text() == "0000:0000:0000:0100\n"
    assert (p / "ports/1/state").read_text() == "4: ACTIVE\n"
    assert (p / "ports/1/phys_state").read_text() == "5: LinkUp\n"
    assert (p / "ports/1/rate").read_text() == "400 Gb/sec (4X NDR)\n"
    assert (p / "ports/1/lid").read_text() == "0x5\n"
    assert (p / "ports/1/gids/0").read_text() == "fe80:0000:0000:0000:0000:0000:0000:0101\n"
    assert (p / "ports/1/pkeys/1").read_text() == "0x8101\n"
    assert (p / "ports/1/pkeys/127").read_text() == "0x0000\n"
    assert format_rate(1, "SDR") == "2.5 Gb/sec (1X SDR)"
    assert format_rate(4, "HDR") == "200 Gb/sec (4X HDR)"
    port = InfinibandCollector(tmp_path).collect()[0].ports[0]
    assert port.port_guid == "0x0000000000000101"
    assert port.pkeys == ["0xffff", "0x8101"]
    assert port.rate_gbps == 400.0


def test_no_pma_writer(tmp_path: Path) -> None:
    w = FakeSysfsWriter(tmp_path)
    w.add(FakeHca(name="i40iw0", no_pma=True))
    port = InfinibandCollector(tmp_path).collect()[0].ports[0]
    assert port.counters == {}
    assert "port_xmit_data" in port.unavailable
