"""InfiniBand collector: reads ``<sysfs_root>/class/infiniband`` like node_exporter does.

Every file is read on its own: a missing file, a failing ``read()`` (new kernels answer
EINVAL/EPERM/ENOENT/EOPNOTSUPP for a device without a PMA) or an ``N/A (no PMA)`` body
(old kernels) makes that one value unavailable, never the whole sample.
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

# Counter widths (bits) from the IBA PortCounters attribute; see docs/agent-protocol.md.
FIXED_WIDTHS: dict[str, int] = {
    "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
    "link_error_recovery": 8,
    "link_downed": 8,
    "port_xmit_constraint_errors": 8,
    "port_rcv_constraint_errors": 8,
    "symbol_error": 16,
    "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16,
    "port_rcv_switch_relay_errors": 16,
    "port_xmit_discards": 16,
    "port_rcv_discards": 16,
    "VL15_dropped": 16,
    "port_xmit_wait": 32,
}
# 32 bits in PortCounters, 64 bits when the device supports PortCountersExtended.
EXTENDABLE: frozenset[str] = frozenset(
    {
        "port_xmit_data",
        "port_rcv_data",
        "port_xmit_packets",
        "port_rcv_packets",
        "unicast_xmit_packets",
        "unicast_rcv_packets",
        "multicast_xmit_packets",
        "multicast_rcv_packets",
    }
)
EXTENDED_ONLY: frozenset[str] = frozenset(
    {
        "unicast_xmit_packets",
        "unicast_rcv_packets",
        "multicast_xmit_packets",
        "multicast_rcv_packets",
    }
)
DATA_COUNTERS: frozenset[str] = frozenset({"port_xmit_data", "port_rcv_data"})
NO_PMA = "N/A (no PMA)"
_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec(?:\s*\((\d+)X\s*([A-Za-z0-9]*)\))?")


def counter_width(name: str, extended: bool) -> int:
    if name in FIXED_WIDTHS:
        return FIXED_WIDTHS[name]
    if name in EXTENDABLE:
        return 64 if extended else 32
    return 64


def counter_max(name: str, extended: bool) -> int:
    return (1 << counter_width(name, extended)) - 1


@dataclass
class IbPort:
    device: str
    port: int
    state: str | None = None
    state_id: int | None = None
    phys_state: str | None = None
    phys_state_id: int | None = None
    rate_gbps: float | None = None
    link_width: str | None = None
    link_speed: str | None = None
    link_layer: str | None = None
    lid: int | None = None
    sm_lid: int | None = None
    port_guid: str | None = None
    pkeys: list[str] | None = None
    counters: dict[str, int] = field(default_factory=dict)
    counters_ext: dict[str, int] = field(default_factory=dict)
    hw_counters: dict[str, int] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    extended: bool = False

    @property
    def saturated(self) -> list[str]:
        """32-bit (or narrower) counters stuck at their maximum: unknown since then."""
        return sorted(
            name
            for name, value in self.counters.items()
            if value >= counter_max(name, self.extended)
        )

    def data_bytes(self, name: str) -> int | None:
        """``port_xmit_data``/``port_rcv_data`` count 4-octet words: bytes = value x 4."""
        value = self.counters.get(name)
        if value is None or name in self.saturated:
            return None
        return value * 4


@dataclass
class IbDevice:
    name: str
    board_id: str | None = None
    fw_ver: str | None = None
    hca_type: str | None = None
    node_guid: str | None = None
    node_type: str | None = None
    node_desc: str | None = None
    ports: list[IbPort] = field(default_factory=list)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def _read_counter(path: Path) -> tuple[int | None, str | None]:
    """Return (value, reason it is unavailable)."""
    try:
        text = path.read_text(errors="replace").strip()
    except OSError as exc:
        return None, errno.errorcode.get(exc.errno or 0, "EIO")
    if text.startswith("N/A"):
        return None, text
    try:
        return int(text, 0) if text.startswith("0x") else int(text), None
    except ValueError:
        return None, f"unparsable {text[:40]!r}"


def parse_state(text: str | None) -> tuple[int | None, str | None]:
    """``4: ACTIVE`` -> (4, "ACTIVE")."""
    if not text:
        return None, None
    head, _, tail = text.partition(":")
    try:
        return int(head), tail.strip() or None
    except ValueError:
        return None, text


def parse_rate(text: str | None) -> tuple[float | None, str | None, str | None]:
    """``200 Gb/sec (4X HDR)`` -> (200.0, "4X", "HDR"); old SDR ``10 Gb/sec (4X)``."""
    if not text:
        return None, None, None
    m = _RATE_RE.match(text)
    if m is None:
        return None, None, None
    width = f"{m.group(2)}X" if m.group(2) else None
    return float(m.group(1)), width, (m.group(3) or None)


def gid_to_guid(gid: str | None) -> str | None:
    """Port GUID = low 64 bits of gids/0, as ``0x`` + 16 hex digits."""
    if not gid:
        return None
    groups = gid.split(":")
    if len(groups) != 8:
        return None
    try:
        value = int("".join(g.zfill(4) for g in groups[4:]), 16)
    except ValueError:
        return None
    return None if value == 0 else f"0x{value:016x}"


def _parse_hex(text: str | None) -> int | None:
    if not text:
        return None
    try:
        return int(text, 16)
    except ValueError:
        return None


class InfinibandCollector:
    """Collects every device/port under ``<sysfs_root>/class/infiniband``."""

    def __init__(self, sysfs_root: Path | str = "/sys") -> None:
        self.base = Path(sysfs_root) / "class" / "infiniband"

    def collect(self) -> list[IbDevice]:
        try:
            names = sorted(os.listdir(self.base))
        except OSError:
            return []
        return [self._device(name) for name in names]

    def partitions_view(self) -> list[IbDevice]:
        """Only what partition checks read (each port's GUID, link layer and P_Key table):
        the convergence watch re-reads this every step, and a port's counters are most of
        what ``collect`` reads."""
        try:
            names = sorted(os.listdir(self.base))
        except OSError:
            return []
        return [self._device(name, full=False) for name in names]

    def _device(self, name: str, full: bool = True) -> IbDevice:
        d = self.base / name
        dev = IbDevice(name=name)
        if full:
            dev.board_id, dev.fw_ver, dev.hca_type = (
                _read(d / "board_id"), _read(d / "fw_ver"), _read(d / "hca_type"))
            dev.node_guid, dev.node_type, dev.node_desc = (
                _read(d / "node_guid"), _read(d / "node_type"), _read(d / "node_desc"))
        try:
            port_names = os.listdir(d / "ports")
        except OSError:
            port_names = []
        for pn in sorted((p for p in port_names if p.isdigit()), key=int):
            port = d / "ports" / pn
            dev.ports.append(self._port(name, int(pn), port) if full
                             else self._port_partitions(name, int(pn), port))
        return dev

    def _port_partitions(self, device: str, num: int, p: Path) -> IbPort:
        port = IbPort(device=device, port=num)
        port.link_layer = _read(p / "link_layer")
        port.port_guid = gid_to_guid(_read(p / "gids" / "0"))
        port.pkeys = _read_pkeys(p / "pkeys")
        return port

    def _port(self, device: str, num: int, p: Path) -> IbPort:
        port = IbPort(device=device, port=num)
        port.state_id, port.state = parse_state(_read(p / "state"))
        port.phys_state_id, port.phys_state = parse_state(_read(p / "phys_state"))
        port.rate_gbps, port.link_width, port.link_speed = parse_rate(_read(p / "rate"))
        port.link_layer = _read(p / "link_layer")
        port.lid = _parse_hex(_read(p / "lid"))
        port.sm_lid = _parse_hex(_read(p / "sm_lid"))
        port.port_guid = gid_to_guid(_read(p / "gids" / "0"))
        port.pkeys = _read_pkeys(p / "pkeys")
        port.counters = _read_dir(p / "counters", port.unavailable, "")
        port.counters_ext = _read_dir(p / "counters_ext", port.unavailable, "counters_ext/")
        port.hw_counters = _read_dir(p / "hw_counters", port.unavailable, "hw_counters/")
        port.extended = bool(EXTENDED_ONLY & port.counters.keys()) or any(
            port.counters.get(n, 0) > 0xFFFFFFFF for n in EXTENDABLE
        )
        return port


def _read_dir(d: Path, unavailable: dict[str, str], prefix: str) -> dict[str, int]:
    values: dict[str, int] = {}
    try:
        names = sorted(os.listdir(d))
    except OSError:
        return values
    for name in names:
        if (d / name).is_dir():
            continue
        value, reason = _read_counter(d / name)
        if value is None:
            unavailable[prefix + name] = reason or "unavailable"
        else:
            values[name] = value
    return values


def _read_pkeys(d: Path) -> list[str] | None:
    """Non-empty P_Key table entries in index order (``0x8101``); None without a table."""
    try:
        names = os.listdir(d)
    except OSError:
        return None
    keys: list[str] = []
    for name in sorted((n for n in names if n.isdigit()), key=int):
        value = _parse_hex(_read(d / name))
        if value is not None and value & 0x7FFF:
            keys.append(f"0x{value:04x}")
    return keys
