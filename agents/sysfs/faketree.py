"""Writes a fake ``/sys/class/infiniband`` (and ``/sys/class/net`` IPoIB) tree in the
exact kernel formats (``drivers/infiniband/core/sysfs.c``), for the simulator and demo."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from agents.sysfs.infiniband import EXTENDABLE, EXTENDED_ONLY, FIXED_WIDTHS, counter_max

# sysfs prints the data rate (what ib_query_port's active_speed maps to), not signalling:
RATE_GBPS = {
    "SDR": 2.5, "DDR": 5, "QDR": 10, "FDR10": 10, "FDR": 14, "EDR": 25, "HDR": 50,
    "NDR": 100, "XDR": 200,
}  # fmt: skip
STATES = {1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
PHYS_STATES = {
    1: "Sleep", 2: "Polling", 3: "Disabled", 4: "PortConfigurationTraining", 5: "LinkUp",
    6: "LinkErrorRecovery", 7: "Phy Test",
}  # fmt: skip
PKEY_TABLE_SIZE = 128


def format_rate(lanes: int, speed: str) -> str:
    """Kernel ``rate_show``: ``%d%s Gb/sec (%dX%s)``; half rates print ``.5``."""
    total = RATE_GBPS[speed] * lanes
    whole = int(total)
    frac = ".5" if total - whole >= 0.5 else ""
    return f"{whole}{frac} Gb/sec ({lanes}X {speed})"


def format_guid(value: int) -> str:
    """``node_guid`` format: 4 groups of 4 hex digits."""
    h = f"{value:016x}"
    return ":".join(h[i : i + 4] for i in range(0, 16, 4))


def format_gid(port_guid: int, prefix: int = 0xFE80000000000000) -> str:
    h = f"{prefix:016x}{port_guid:016x}"
    return ":".join(h[i : i + 4] for i in range(0, 32, 4))


@dataclass
class FakePort:
    num: int = 1
    port_guid: int = 0
    lid: int = 1
    sm_lid: int = 1
    state: int = 4
    phys_state: int = 5
    lanes: int = 4
    speed: str = "NDR"
    link_layer: str = "InfiniBand"
    pkeys: list[int] = field(default_factory=lambda: [0xFFFF])
    counters: dict[str, int] = field(default_factory=dict)
    hw_counters: dict[str, int] = field(default_factory=dict)


@dataclass
class FakeHca:
    name: str = "mlx5_0"
    node_guid: int = 0
    node_desc: str = ""
    fw_ver: str = "28.39.1002"
    board_id: str = "MT_0000000838"
    hca_type: str = "MT4129"
    extended: bool = True  # PortCountersExtended: 64-bit data/packet counters
    no_pma: bool = False  # every counter reads "N/A (no PMA)" (old kernels)
    ports: list[FakePort] = field(default_factory=lambda: [FakePort()])


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class FakeSysfsWriter:
    """Owns a fake sysfs root; write devices, then bump counters between samples."""

    def __init__(self, root: Path, pkey_table_size: int = PKEY_TABLE_SIZE) -> None:
        self.root = Path(root)
        self.hcas: dict[str, FakeHca] = {}
        self.pkey_table_size = pkey_table_size

    def add(self, hca: FakeHca) -> None:
        self.hcas[hca.name] = hca
        self.write(hca.name)

    def write(self, name: str) -> None:
        hca = self.hcas[name]
        d = self.root / "class" / "infiniband" / hca.name
        _write(d / "node_guid", format_guid(hca.node_guid) + "\n")
        _write(d / "sys_image_guid", format_guid(hca.node_guid) + "\n")
        _write(d / "node_type", "1: CA\n")
        _write(d / "fw_ver", hca.fw_ver + "\n")
        _write(d / "board_id", hca.board_id + "\n")
        _write(d / "hca_type", hca.hca_type + "\n")
        _write(d / "node_desc", hca.node_desc + "\n")
        for port in hca.ports:
            self._write_port(hca, port, d / "ports" / str(port.num))

    def _write_port(self, hca: FakeHca, port: FakePort, p: Path) -> None:
        _write(p / "state", f"{port.state}: {STATES[port.state]}\n")
        _write(p / "phys_state", f"{port.phys_state}: {PHYS_STATES[port.phys_state]}\n")
        _write(p / "rate", format_rate(port.lanes, port.speed) + "\n")
        _write(p / "lid", f"0x{port.lid:x}\n")
        _write(p / "sm_lid", f"0x{port.sm_lid:x}\n")
        _write(p / "lid_mask_count", "0\n")
        _write(p / "link_layer", port.link_layer + "\n")
        _write(p / "gids" / "0", format_gid(port.port_guid) + "\n")
        size = self.pkey_table_size
        table = [*port.pkeys, *([0] * (size - len(port.pkeys)))]
        for i, key in enumerate(table[:size]):
            _write(p / "pkeys" / str(i), f"0x{key:04x}\n")
        names = list(FIXED_WIDTHS) + [
            n for n in sorted(EXTENDABLE) if hca.extended or n not in EXTENDED_ONLY
        ]
        for name in names:
            _write(p / "counters" / name, self._counter_text(hca, port, name))
        for name, value in port.hw_counters.items():
            _write(p / "hw_counters" / name, f"{value}\n")

    @staticmethod
    def _counter_text(hca: FakeHca, port: FakePort, name: str) -> str:
        if hca.no_pma:
            return "N/A (no PMA)\n"
        value = min(port.counters.get(name, 0), counter_max(name, hca.extended))
        return f"{value}\n"

    def bump(self, name: str, port_num: int, **deltas: int) -> None:
        """Advance counters like hardware does (narrow counters stick at their max)."""
        hca = self.hcas[name]
        port = next(p for p in hca.ports if p.num == port_num)
        counters = self.root / "class" / "infiniband" / name / "ports" / str(port_num) / "counters"
        for counter, delta in deltas.items():
            limit = counter_max(counter, hca.extended)
            port.counters[counter] = min(port.counters.get(counter, 0) + delta, limit)
            _write(counters / counter, self._counter_text(hca, port, counter))

    def link_down(self, name: str, port_num: int = 1) -> None:
        """As :func:`link_down`, keeping this writer's model in step (a later ``write``
        keeps the link down)."""
        port = next(p for p in self.hcas[name].ports if p.num == port_num)
        port.state, port.phys_state = 1, 3
        self.bump(name, port_num, link_downed=1)
        set_port_state(self.root, name, port_num, 1, 3)

    def link_up(self, name: str, port_num: int = 1) -> None:
        port = next(p for p in self.hcas[name].ports if p.num == port_num)
        port.state, port.phys_state = 4, 5
        set_port_state(self.root, name, port_num, 4, 5)

    def set_pkeys(self, name: str, port_num: int, pkeys: list[int]) -> None:
        hca = self.hcas[name]
        next(p for p in hca.ports if p.num == port_num).pkeys = list(pkeys)
        self.write(name)

    def add_netdev(self, ifname: str, pkey: int = 0xFFFF, parent: str = "") -> Path:
        """An IPoIB netdev under ``class/net`` with ``pkey``/``create_child`` files."""
        d = self.root / "class" / "net" / ifname
        _write(d / "pkey", f"0x{pkey:04x}\n")
        _write(d / "type", "32\n")
        if parent:
            _write(d / "parent", parent + "\n")
        else:
            _write(d / "create_child", "")
            _write(d / "delete_child", "")
        return d


# --- a running tree changed as the kernel would (the agent reads it in another process) --
def _port_dir(root: Path | str, device: str, port: int) -> Path:
    return Path(root) / "class" / "infiniband" / device / "ports" / str(port)


def set_port_state(root: Path | str, device: str, port: int = 1, state: int = 1,
                   phys_state: int = 3) -> None:  # fmt: skip
    """Write ``state`` / ``phys_state`` as the kernel prints them (``1: DOWN``,
    ``3: Disabled``; ``4: ACTIVE`` / ``5: LinkUp`` when the link is back)."""
    p = _port_dir(root, device, port)
    _write(p / "state", f"{state}: {STATES[state]}\n")
    _write(p / "phys_state", f"{phys_state}: {PHYS_STATES[phys_state]}\n")


def bump_counter(root: Path | str, device: str, port: int, counter: str,
                 delta: int = 1) -> int:  # fmt: skip
    """Add ``delta`` to a ``counters/`` file (narrow counters stick at their maximum, as
    the PMA's do); returns the new value."""
    path = _port_dir(root, device, port) / "counters" / counter
    try:
        current = int(path.read_text().strip() or 0)
    except (OSError, ValueError):
        current = 0
    value = min(current + delta, counter_max(counter, True))
    _write(path, f"{value}\n")
    return value


def link_down(root: Path | str, device: str, port: int = 1) -> None:
    """The link is lost: port DOWN / Disabled and ``link_downed`` + 1."""
    set_port_state(root, device, port, 1, 3)
    bump_counter(root, device, port, "link_downed")


def link_up(root: Path | str, device: str, port: int = 1) -> None:
    set_port_state(root, device, port, 4, 5)


def set_rate(root: Path | str, device: str, port: int, lanes: int, speed: str) -> None:
    """A link that trained at fewer lanes or a lower speed (``100 Gb/sec (1X NDR)``)."""
    _write(_port_dir(root, device, port) / "rate", format_rate(lanes, speed) + "\n")


def gpu_node_hcas(index: int, count: int = 1) -> list[FakeHca]:
    """Deterministic HCAs for simulated node ``index`` (GUIDs like ibsim's 0x1000xx)."""
    hcas = []
    for i in range(count):
        node_guid = 0x0002C90300000000 + (index << 8) + (i << 1)
        hcas.append(
            FakeHca(
                name=f"mlx5_{i}",
                node_guid=node_guid,
                node_desc=f"gpu-node-{index:02d} mlx5_{i}",
                ports=[FakePort(num=1, port_guid=node_guid + 1, lid=(index * 8 + i) % 0xBFFF + 1)],
            )
        )
    return hcas
