from pathlib import Path

import pytest

from agents.sysfs import ttar
from tests.agents.conftest import SYSFS_FIXTURES


def test_quirks_of_recorded_data_survive(tmp_path: Path) -> None:
    ttar.extract((SYSFS_FIXTURES / "procfs-infiniband.ttar").read_text(), tmp_path)
    base = tmp_path / "fixtures/sys/class/infiniband"
    # EOF marker: no trailing newline
    assert (base / "mlx5_0/node_guid").read_text() == "0a7f:bc12:45ef:d23b"
    # link_layer with an extra blank line is kept as recorded
    assert (base / "mlx4_0/ports/2/link_layer").read_text() == "InfiniBand\n\n"
    assert (base / "mlx4_0/ports/1/counters/port_xmit_wait").read_text() == "3599\n"


def test_roundtrip(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "a/b").mkdir(parents=True)
    (src / "a/b/one").write_text("1\n")
    (src / "a/nonl").write_text("x")
    (src / "a/empty").write_text("")
    (src / "a/multi").write_text("l1\n\nl3\n")
    text = ttar.archive(src)
    out = tmp_path / "out"
    ttar.extract(text, out)
    for rel in ("a/b/one", "a/nonl", "a/empty", "a/multi"):
        assert (out / rel).read_text() == (src / rel).read_text()


def test_malformed() -> None:
    with pytest.raises(ttar.TtarError):
        ttar.parse("Path: x\nLines: 3\nonly one\n")
    with pytest.raises(ttar.TtarError):
        ttar.parse("garbage\n")
