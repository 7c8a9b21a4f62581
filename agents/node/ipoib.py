"""IPoIB child interfaces (``ib0.8101``) for tenant partitions, behind an interface."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Protocol


def child_name(parent: str, pkey: int) -> str:
    return f"{parent}.{pkey | 0x8000:04x}"


class IpoibManager(Protocol):
    def children(self, parent: str) -> dict[str, int]: ...
    def create(self, parent: str, pkey: int) -> str: ...
    def remove(self, parent: str, pkey: int) -> None: ...


class SysfsIpoib:
    """Uses ``/sys/class/net/<parent>/create_child`` / ``delete_child`` under a root."""

    def __init__(self, sysfs_root: Path | str = "/sys") -> None:
        self.net = Path(sysfs_root) / "class" / "net"

    def children(self, parent: str) -> dict[str, int]:
        out: dict[str, int] = {}
        try:
            names = os.listdir(self.net)
        except OSError:
            return out
        for name in names:
            if not name.startswith(parent + "."):
                continue
            try:
                out[name] = int((self.net / name / "pkey").read_text().strip(), 16)
            except (OSError, ValueError):
                continue
        return out

    def create(self, parent: str, pkey: int) -> str:
        (self.net / parent / "create_child").write_text(f"0x{pkey | 0x8000:04x}\n")
        return child_name(parent, pkey)

    def remove(self, parent: str, pkey: int) -> None:
        (self.net / parent / "delete_child").write_text(f"0x{pkey | 0x8000:04x}\n")


class IpLinkIpoib(SysfsIpoib):
    """``ip link add link ib0 name ib0.8101 type ipoib pkey 0x8101`` (iproute2)."""

    def create(self, parent: str, pkey: int) -> str:
        name = child_name(parent, pkey)
        subprocess.run(
            ["ip", "link", "add", "link", parent, "name", name, "type", "ipoib",
             "pkey", f"0x{pkey | 0x8000:04x}"], check=True, capture_output=True,
        )  # fmt: skip
        return name

    def remove(self, parent: str, pkey: int) -> None:
        name = child_name(parent, pkey)
        subprocess.run(["ip", "link", "delete", name], check=True, capture_output=True)


class FakeIpoib:
    def __init__(self) -> None:
        self.links: dict[str, dict[str, int]] = {}
        self.calls: list[tuple[str, str, int]] = []

    def children(self, parent: str) -> dict[str, int]:
        return dict(self.links.get(parent, {}))

    def create(self, parent: str, pkey: int) -> str:
        self.calls.append(("create", parent, pkey))
        name = child_name(parent, pkey)
        self.links.setdefault(parent, {})[name] = pkey | 0x8000
        return name

    def remove(self, parent: str, pkey: int) -> None:
        self.calls.append(("remove", parent, pkey))
        self.links.get(parent, {}).pop(child_name(parent, pkey), None)
