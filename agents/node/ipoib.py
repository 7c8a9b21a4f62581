"""IPoIB child interfaces (``ib0.8101``) for tenant partitions, behind an interface."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from agents.host import FakeHost, HostCommands, checked


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
    """``ip link add link ib0 name ib0.8101 type ipoib pkey 0x8101`` (iproute2), run
    through ``host`` (a recording fake unless the caller passes the real host)."""

    def __init__(self, sysfs_root: Path | str = "/sys", host: HostCommands | None = None) -> None:
        super().__init__(sysfs_root)
        self.host = host if host is not None else FakeHost()

    def create(self, parent: str, pkey: int) -> str:
        name = child_name(parent, pkey)
        argv = ["ip", "link", "add", "link", parent, "name", name, "type", "ipoib",
                "pkey", f"0x{pkey | 0x8000:04x}"]  # fmt: skip
        checked(self.host.run(argv), argv)
        return name

    def remove(self, parent: str, pkey: int) -> None:
        argv = ["ip", "link", "delete", child_name(parent, pkey)]
        checked(self.host.run(argv), argv)


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
