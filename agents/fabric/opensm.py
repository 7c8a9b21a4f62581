"""OpenSM driver: owns one marked block of ``partitions.conf`` (operator lines outside it
are kept), writes the file atomically, SIGHUPs OpenSM, and reads P_Key tables back with
``smpquery -G pkeys <guid>`` (infiniband-diags).

What the driver manages is read from the file's block, never remembered: a restarted
driver knows the members it wrote before, removes the stale ones and verifies them."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from agents.client.spool import atomic_write
from agents.fabric.base import Membership, Partition, PartitionMap

BEGIN = "# BEGIN gpupool fabric agent: this block is rewritten on every change"
END = "# END gpupool fabric agent"
# files written whole by earlier versions of the agent: all of it was ours
LEGACY_HEADER = "# Managed by the gpupool fabric agent"
_PKEY_WORD = re.compile(r"0x[0-9a-fA-F]{4}")
_STATEMENT = re.compile(r"^\s*(?P<name>[A-Za-z0-9_]+)\s*=\s*(?P<pkey>0x[0-9a-fA-F]+)"
                        r"(?P<flags>[^:]*):(?P<members>[^;]*);")  # fmt: skip
_DEFAULT = re.compile(r"^\s*(Default\b|[A-Za-z0-9_]*\s*=\s*0x7fff\b)", re.M | re.I)


def _statements(p: Partition) -> list[str]:
    """One statement for the members that want the key at index 0 (``indx0`` applies to
    every port of its statement), one for the others; OpenSM merges statements of the same
    key. The first carries ``ipoib`` (the broadcast group is made once)."""
    split = [[m for m in p.members if m[0] in p.index0],
             [m for m in p.members if m[0] not in p.index0]]  # fmt: skip
    lines: list[str] = []
    for index0, members in zip((True, False), split, strict=True):
        if not members:
            continue
        flags = (",ipoib" if p.ipoib and not lines else "") + (",indx0" if index0 else "")
        listed = ", ".join(f"{guid}={membership}" for guid, membership in members)
        lines.append(f"{p.name}=0x{p.pkey:04x}{flags} : {listed} ;")
    return lines


def render_block(pmap: PartitionMap, default_line: str | None) -> str:
    lines = [BEGIN, f"# generation {pmap.generation}"]
    if default_line:
        lines.append(default_line)
    for p in pmap.partitions:
        lines.extend(_statements(p))  # an empty partition renders nothing: OpenSM keeps none
    return "\n".join([*lines, END]) + "\n"


def default_line(default_membership: str) -> str:
    """Default partition: everyone ``limited`` (hosts reach the SM but not each other) and
    ``SELF=full``; or ``full`` for an open default."""
    if default_membership == "full":
        return "Default=0x7fff,ipoib : ALL=full ;"
    return "Default=0x7fff,ipoib : ALL=limited, SELF=full ;"


def split_conf(text: str) -> tuple[str, str, str]:
    """(operator text before the block, the block, operator text after it)."""
    if text.startswith(LEGACY_HEADER):
        return "", text, ""
    start = text.find(BEGIN)
    if start < 0:
        return text, "", ""
    end = text.find(END, start)
    end = len(text) if end < 0 else text.find("\n", end) + 1 or len(text)
    return text[:start], text[start:end], text[end:]


def parse_block(block: str) -> dict[int, Membership]:
    """Members per 15-bit key of the statements in our block (Default excluded)."""
    out: dict[int, Membership] = {}
    for line in block.splitlines():
        m = _STATEMENT.match(line)
        if m is None or int(m.group("pkey"), 16) & 0x7FFF == 0x7FFF:
            continue
        members = out.setdefault(int(m.group("pkey"), 16) & 0x7FFF, {})
        for item in m.group("members").split(","):
            guid, _, membership = item.strip().partition("=")
            if guid.startswith("0x"):
                members[f"0x{int(guid, 16):016x}"] = membership.strip() or "limited"
    return out


def render_partitions_conf(pmap: PartitionMap, default_membership: str = "limited",
                           current: str = "") -> str:  # fmt: skip
    """The whole file: operator text kept, our block replaced (appended when absent). The
    block renders the Default partition unless the operator's text already has one."""
    before, _, after = split_conf(current)
    outside = before + after
    own_default = None if _DEFAULT.search(outside) else default_line(default_membership)
    if before and not before.endswith("\n"):
        before += "\n"
    return before + render_block(pmap, own_default) + after


def parse_smpquery_pkeys(output: str) -> list[int]:
    """``   0: 0xffff 0x8101 0x0000 …`` lines -> non-empty 16-bit entries."""
    return [k for k in parse_smpquery_table(output) if k & 0x7FFF]


def parse_smpquery_table(output: str) -> list[int]:
    """Every entry in table order, empty ones (``0x0000``) included: position = index."""
    keys: list[int] = []
    for line in output.splitlines():
        head, sep, rest = line.partition(":")
        if not sep or not head.strip().isdigit():
            continue
        keys.extend(int(w, 16) for w in _PKEY_WORD.findall(rest))
    return keys


# smpquery reads one port per process: a read-back of N ports runs this many at once
# (each spends most of its time waiting on the MAD round trip, not on a CPU); ibsim
# serves at most 10 clients, OpenSM included, so a simulated fabric wants fewer
READ_BACK_PARALLEL = 8


class OpenSmManager:
    name = "opensm"

    def __init__(self, conf_path: Path, pid: int | Callable[[], int] | None = None,
                 pid_file: Path | None = None, diag_prefix: Sequence[str] = (),
                 default_membership: str = "limited", run: Callable[..., str] | None = None,
                 parallel: int = READ_BACK_PARALLEL) -> None:  # fmt: skip
        self.conf_path = Path(conf_path)
        self._pid, self.pid_file = pid, pid_file
        self.diag_prefix = list(diag_prefix)  # e.g. ["ibsim-run"] on a simulated fabric
        self.default_membership = default_membership
        self.run = run or _run
        self.parallel = max(1, parallel)
        self._tables: dict[str, list[int]] = {}  # the last read-back, for read_index0

    def pid(self) -> int | None:
        if callable(self._pid):
            return self._pid()
        if self._pid is not None:
            return self._pid
        if self.pid_file is not None:
            try:
                return int(self.pid_file.read_text().strip())
            except (OSError, ValueError):
                return None
        return None

    def _current(self) -> str:
        try:
            return self.conf_path.read_text()
        except FileNotFoundError:
            return ""

    def managed(self) -> dict[int, Membership]:
        return parse_block(split_conf(self._current())[1])

    def apply(self, pmap: PartitionMap) -> None:
        text = render_partitions_conf(pmap, self.default_membership, self._current())
        self.conf_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.conf_path, text, 0o644)
        if self.conf_path.read_text() != text:
            raise OSError(f"{self.conf_path}: read-back differs from what was written")
        pid = self.pid()
        if pid is None:
            raise ProcessLookupError("OpenSM pid unknown: cannot SIGHUP")
        os.kill(pid, signal.SIGHUP)  # OpenSM re-reads partitions.conf on a heavy sweep

    def table(self, guid: str) -> list[int]:
        """The port's P_Key table in index order (empty entries included)."""
        return parse_smpquery_table(self.run([*self.diag_prefix, "smpquery", "-G", "pkeys",
                                              guid]))  # fmt: skip

    def tables(self, guids: set[str]) -> dict[str, list[int]]:
        """Every port's table, read ``parallel`` ports at a time (one after the other,
        8 ports took 8 process round trips per verification round)."""
        ordered = sorted(guids)
        if len(ordered) <= 1 or self.parallel == 1:
            return {guid: self.table(guid) for guid in ordered}
        with ThreadPoolExecutor(min(self.parallel, len(ordered)),
                                thread_name_prefix="smpquery") as pool:  # fmt: skip
            return dict(zip(ordered, pool.map(self.table, ordered), strict=True))

    def read_back(self, guids: set[str]) -> dict[int, Membership]:
        actual: dict[int, Membership] = {}
        self._tables = self.tables(guids)
        for guid, table in self._tables.items():
            for key in table:
                if key & 0x7FFF in (0, 0x7FFF):
                    continue
                membership = "full" if key & 0x8000 else "limited"
                actual.setdefault(key & 0x7FFF, {})[guid] = membership
        return actual

    def read_index0(self, guids: set[str]) -> dict[str, int]:
        """From the tables of the last read-back (taken just before), else queried."""
        out = {}
        for guid in sorted(guids):
            table = self._tables.get(guid) or self.table(guid)
            if table:
                out[guid] = table[0] & 0x7FFF
        return out


def _run(argv: list[str]) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
    return proc.stdout
