"""OpenSM driver: renders ``partitions.conf``, writes it atomically, SIGHUPs OpenSM, and
reads P_Key tables back with ``smpquery -G pkeys <guid>`` (infiniband-diags)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from agents.client.spool import atomic_write
from agents.fabric.base import Membership, PartitionMap

HEADER = "# Managed by the gpupool fabric agent: every change here is overwritten.\n"
_PKEY_WORD = re.compile(r"0x[0-9a-fA-F]{4}")


def render_partitions_conf(pmap: PartitionMap, default_membership: str = "limited") -> str:
    """OpenSM partition-config syntax. Default partition: everyone ``limited`` (hosts reach
    the SM but not each other) and ``SELF=full``; or ``full`` for an open default."""
    if default_membership == "full":
        default = "Default=0x7fff,ipoib : ALL=full ;"
    else:
        default = "Default=0x7fff,ipoib : ALL=limited, SELF=full ;"
    lines = [HEADER.rstrip("\n"), f"# generation {pmap.generation}", default]
    for p in pmap.partitions:
        if not p.members:
            continue  # OpenSM keeps nothing for an empty partition: leave it out
        flags = ",ipoib" if p.ipoib else ""
        members = ", ".join(f"{guid}={membership}" for guid, membership in p.members)
        lines.append(f"{p.name}=0x{p.pkey:04x}{flags} : {members} ;")
    return "\n".join(lines) + "\n"


def parse_smpquery_pkeys(output: str) -> list[int]:
    """``   0: 0xffff 0x8101 0x0000 …`` lines -> non-empty 16-bit entries."""
    keys: list[int] = []
    for line in output.splitlines():
        head, sep, rest = line.partition(":")
        if not sep or not head.strip().isdigit():
            continue
        keys.extend(int(w, 16) for w in _PKEY_WORD.findall(rest) if int(w, 16) & 0x7FFF)
    return keys


class OpenSmManager:
    name = "opensm"

    def __init__(self, conf_path: Path, pid: int | Callable[[], int] | None = None,
                 pid_file: Path | None = None, diag_prefix: Sequence[str] = (),
                 default_membership: str = "limited", run: Callable[..., str] | None = None,
                 ) -> None:  # fmt: skip
        self.conf_path = Path(conf_path)
        self._pid, self.pid_file = pid, pid_file
        self.diag_prefix = list(diag_prefix)  # e.g. ["ibsim-run"] on a simulated fabric
        self.default_membership = default_membership
        self.run = run or _run

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

    def apply(self, pmap: PartitionMap) -> None:
        text = render_partitions_conf(pmap, self.default_membership)
        self.conf_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.conf_path, text, 0o644)
        if self.conf_path.read_text() != text:
            raise OSError(f"{self.conf_path}: read-back differs from what was written")
        pid = self.pid()
        if pid is None:
            raise ProcessLookupError("OpenSM pid unknown: cannot SIGHUP")
        os.kill(pid, signal.SIGHUP)  # OpenSM re-reads partitions.conf on a heavy sweep

    def read_back(self, guids: set[str]) -> dict[int, Membership]:
        actual: dict[int, Membership] = {}
        for guid in sorted(guids):
            out = self.run([*self.diag_prefix, "smpquery", "-G", "pkeys", guid])
            for key in parse_smpquery_pkeys(out):
                if key & 0x7FFF == 0x7FFF:
                    continue
                membership = "full" if key & 0x8000 else "limited"
                actual.setdefault(key & 0x7FFF, {})[guid] = membership
        return actual


def _run(argv: list[str]) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
    return proc.stdout
