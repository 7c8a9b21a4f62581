"""The device nodes that reach one MIG instance: its GPU instance's and compute instance's
``nvidia-cap`` access capabilities (NVIDIA MIG user guide, "Device Nodes and
Capabilities"; issue 28).

For each GPU instance ``G`` of GPU ``N`` the driver publishes
``/proc/driver/nvidia/capabilities/gpuN/mig/giG/access`` and, for each of its compute
instances ``C``, ``.../giG/ciC/access``; each file reads::

    DeviceFileMinor: 12
    DeviceFileMode: 292
    DeviceFileModify: 1

The device node is ``/dev/nvidia-caps/nvidia-cap<DeviceFileMinor>``, a character device
of the major that ``/proc/devices`` names ``nvidia-caps`` (dynamic, so read, never
assumed). Opening a MIG device needs the parent ``/dev/nvidiaN`` plus both capability
nodes; a device cgroup that allows only one instance's two nodes keeps an account off the
other instances of the same GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CAPS_DIR = "driver/nvidia/capabilities"
CAPS_DEVICE_NAME = "nvidia-caps"
CAP_NODE_DIR = "/dev/nvidia-caps"


class CapsUnreadable(OSError):
    """The capability files of an instance are missing or not in the driver's format."""


@dataclass(frozen=True)
class CapDevice:
    """One capability device node: its path, its char-device numbers, and the proc file
    it stands for (what ``nvidia-modprobe -f`` takes to create the node)."""

    path: str  # /dev/nvidia-caps/nvidia-cap12
    major: int
    minor: int
    proc_path: str  # /proc/driver/nvidia/capabilities/gpu0/mig/gi1/access


def gi_access(gpu: int, gi: int) -> str:
    """The capability file of GPU instance ``gi`` of GPU ``gpu``, under ``CAPS_DIR``."""
    return f"gpu{gpu}/mig/gi{gi}/access"


def ci_access(gpu: int, gi: int, ci: int) -> str:
    """The capability file of compute instance ``ci`` of that GPU instance."""
    return f"gpu{gpu}/mig/gi{gi}/ci{ci}/access"


def parse_minor(text: str) -> int:
    """``DeviceFileMinor`` of an access file's text; ``ValueError`` when it has none."""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "DeviceFileMinor" and value.strip().isdigit():
            return int(value.strip())
    raise ValueError("no DeviceFileMinor line")


def parse_caps_major(devices_text: str) -> int:
    """The major of ``nvidia-caps`` among the character devices of ``/proc/devices``."""
    for line in devices_text.split("Block devices:")[0].splitlines():
        number, _, name = line.strip().partition(" ")
        if name.strip() == CAPS_DEVICE_NAME and number.isdigit():
            return int(number)
    raise ValueError(f"no {CAPS_DEVICE_NAME} character device")


class MigCapabilities:
    """Reads the capability files under a proc root (``/proc`` on a node, a temp tree
    written by the fake NVML in tests)."""

    def __init__(self, proc_root: Path | str = "/proc", shown_root: str = "/proc") -> None:
        self.proc_root = Path(proc_root)
        self.shown_root = shown_root.rstrip("/")  # how proc paths are named to host tools

    def _major(self) -> int:
        try:
            return parse_caps_major((self.proc_root / "devices").read_text())
        except (OSError, ValueError) as exc:
            raise CapsUnreadable(f"{self.proc_root / 'devices'}: {exc}") from exc

    def _device(self, rel: str, major: int) -> CapDevice:
        path = self.proc_root / CAPS_DIR / rel
        try:
            minor = parse_minor(path.read_text())
        except (OSError, ValueError) as exc:
            raise CapsUnreadable(f"{path}: {exc}") from exc
        return CapDevice(f"{CAP_NODE_DIR}/nvidia-cap{minor}", major, minor,
                         f"{self.shown_root}/{CAPS_DIR}/{rel}")

    def instance(self, gpu: int, gi: int, ci: int) -> tuple[CapDevice, CapDevice]:
        """The GPU instance's and the compute instance's capability devices."""
        major = self._major()
        return self._device(gi_access(gpu, gi), major), self._device(ci_access(gpu, gi, ci),
                                                                     major)
