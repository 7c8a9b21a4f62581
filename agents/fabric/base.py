"""Partition map types and the ``FabricManager`` interface (OpenSM, UFM, fake)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol

DEFAULT_PKEY = 0x7FFF
_NAME_RE = re.compile(r"^[A-Za-z0-9_]{1,64}$")

# membership per port GUID ("0x" + 16 hex) for one 15-bit P_Key
Membership = dict[str, str]


@dataclass(frozen=True)
class Partition:
    name: str
    pkey: int  # 15-bit key, full bit clear
    members: tuple[tuple[str, str], ...]  # (guid, "full"|"limited"), sorted
    ipoib: bool = True
    # members whose port must hold this key at P_Key index 0 (what NCCL/UCX/MPI use)
    index0: frozenset[str] = frozenset()

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> Partition:
        pkey = int(d["pkey"], 16) & 0x7FFF
        if not _NAME_RE.match(d["name"]) or pkey in (0, DEFAULT_PKEY):
            raise ValueError(f"invalid partition {d['name']!r} {d['pkey']!r}")
        members = tuple(sorted((m["guid"].lower(), m["membership"]) for m in d["members"]))
        index0 = frozenset(m["guid"].lower() for m in d["members"] if m.get("index0") is True)
        return cls(d["name"], pkey, members, bool(d.get("ipoib", True)), index0)

    def groups(self) -> list[tuple[str, bool, list[str]]]:
        """Members grouped by (membership, index0), index-0 groups first, GUIDs sorted."""
        out: dict[tuple[str, bool], list[str]] = {}
        for guid, membership in self.members:
            out.setdefault((membership, guid in self.index0), []).append(guid)
        return [(m, i0, guids) for (m, i0), guids in sorted(out.items(), key=lambda kv: (
            not kv[0][1], kv[0][0]))]


@dataclass(frozen=True)
class PartitionMap:
    generation: int
    partitions: tuple[Partition, ...] = field(default_factory=tuple)

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> PartitionMap:
        parts = tuple(sorted((Partition.from_wire(p) for p in d.get("partitions", [])),
                             key=lambda p: p.pkey))  # fmt: skip
        return cls(int(d["generation"]), parts)

    def expected(self) -> dict[int, Membership]:
        out: dict[int, Membership] = {}
        for p in self.partitions:
            out.setdefault(p.pkey, {}).update(dict(p.members))
        return out

    def index0(self) -> dict[str, int]:
        """Port GUID -> the 15-bit key it must hold at P_Key index 0."""
        return {guid: p.pkey for p in self.partitions for guid in sorted(p.index0)}


def member_guids(memberships: dict[int, Membership]) -> set[str]:
    return {guid for members in memberships.values() for guid in members}


class FabricManager(Protocol):
    name: str

    def apply(self, pmap: PartitionMap) -> None: ...

    def managed(self) -> dict[int, Membership]:
        """What the fabric holds today under this project's management (read from the
        fabric, not remembered): a restarted driver learns its stale members from it."""
        ...

    def read_back(self, guids: set[str]) -> dict[int, Membership]:
        """Actual membership per 15-bit key for these port GUIDs (Default excluded)."""
        ...

    def read_index0(self, guids: set[str]) -> dict[str, int]:
        """The 15-bit key at P_Key index 0 of each of these ports, where known."""
        ...


def index0_drift(expected: dict[str, int], actual: dict[str, int]) -> list[dict[str, str]]:
    """Ports whose index 0 does not hold the key they asked for there (an SM without
    ``indx0`` support ignores the flag: NCCL would then use the limited default key)."""
    out = []
    for guid, key in sorted(expected.items()):
        have = actual.get(guid)
        if have != key:
            out.append({"pkey": f"0x{key:04x}", "guid": guid, "expected": "index0",
                        "actual": "unknown" if have is None else f"index0 0x{have:04x}"})
    return out


def drift(expected: dict[int, Membership], actual: dict[int, Membership],
          guids: set[str]) -> list[dict[str, str]]:  # fmt: skip
    """Differences for the given GUIDs: expected vs actual membership ("absent")."""
    out: list[dict[str, str]] = []
    for pkey in sorted(set(expected) | set(actual)):
        want, have = expected.get(pkey, {}), actual.get(pkey, {})
        for guid in sorted(guids):
            w, h = want.get(guid, "absent"), have.get(guid, "absent")
            if w != h:
                out.append({"pkey": f"0x{pkey:04x}", "guid": guid, "expected": w, "actual": h})
    return out


class FakeFabric:
    name = "fake"

    def __init__(self) -> None:
        self.applied: list[PartitionMap] = []
        self.state: dict[int, Membership] = {}
        self.fail_with: Exception | None = None

    def apply(self, pmap: PartitionMap) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.applied.append(pmap)
        self.state = {k: dict(v) for k, v in pmap.expected().items()}

    def managed(self) -> dict[int, Membership]:
        return {k: dict(v) for k, v in self.state.items()}

    def read_back(self, guids: set[str]) -> dict[int, Membership]:
        return {k: {g: m for g, m in v.items() if g in guids} for k, v in self.state.items()}

    def read_index0(self, guids: set[str]) -> dict[str, int]:
        last = self.applied[-1].index0() if self.applied else {}
        return {g: k for g, k in last.items() if g in guids}
