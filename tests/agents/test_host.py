from pathlib import Path

from agents.host import HostCollector, write_fake_proc


def test_fake_proc(tmp_path: Path) -> None:
    write_fake_proc(tmp_path, "gpu-node-07", cpus=4, mem_gib=1)
    h = HostCollector(tmp_path).collect()
    assert h.hostname == "gpu-node-07"
    assert h.cpus == 4
    assert h.memory_total_bytes == 1024**3
    assert h.memory_available_bytes == 1024**3 // 2
    assert h.kernel == "6.1.0-18-amd64"
    assert h.uptime_s == 12345.67
    assert h.load1 == 0.5


def test_empty_root_survives(tmp_path: Path) -> None:
    h = HostCollector(tmp_path, hostname="x").collect()
    assert h.hostname == "x"
    assert h.cpus is None
    assert h.memory_total_bytes is None


def test_real_proc() -> None:
    h = HostCollector().collect()
    assert h.hostname
    assert h.cpus
    assert h.cpus >= 1
