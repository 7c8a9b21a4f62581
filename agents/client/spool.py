"""Bounded (count and bytes) on-disk FIFO of reports waiting for the portal.

One file per report (``<seq>.json``, written temp + rename), plus ``state.json`` with the
next sequence number and the count of reports dropped because the spool was full (the
oldest is dropped first). Survives agent restarts: sequence numbers never go back.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def atomic_write(path: Path, text: str, mode: int = 0o600) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class DiskSpool:
    def __init__(self, directory: Path, max_reports: int = 10_000, fsync: bool = True,
                 max_bytes: int = 256 * 1024 * 1024) -> None:  # fmt: skip
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_reports = max_reports
        self.max_bytes = max_bytes
        self.fsync = fsync
        state = self._load_state()
        self.next_seq: int = int(state.get("next_seq", 1))
        self.dropped: int = int(state.get("dropped", 0))
        self._seqs: list[int] = sorted(
            int(p.stem) for p in self.dir.glob("*.json") if p.stem.isdigit()
        )
        self._sizes: dict[int, int] = {}
        for seq in self._seqs:
            try:
                self._sizes[seq] = (self.dir / f"{seq:012d}.json").stat().st_size
            except OSError:
                self._sizes[seq] = 0
        self.bytes = sum(self._sizes.values())

    def _load_state(self) -> dict[str, Any]:
        try:
            data = json.loads((self.dir / "state.json").read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _save_state(self) -> None:
        text = json.dumps({"next_seq": self.next_seq, "dropped": self.dropped})
        self._write(self.dir / "state.json", text)

    def _write(self, path: Path, text: str) -> None:
        if self.fsync:
            atomic_write(path, text)
        else:
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(text)
            os.replace(tmp, path)

    def __len__(self) -> int:
        return len(self._seqs)

    def allocate_seq(self) -> int:
        seq = self.next_seq
        self.next_seq += 1
        self._save_state()
        return seq

    def push(self, report: dict[str, Any]) -> None:
        """Store a report (its ``seq`` from :meth:`allocate_seq`); drop the oldest if full."""
        seq = int(report["seq"])
        text = json.dumps(report, separators=(",", ":"))
        while self._seqs and (len(self._seqs) >= self.max_reports
                              or self.bytes + len(text) > self.max_bytes):  # fmt: skip
            self._remove(self._seqs.pop(0))
            self.dropped += 1
        self._write(self.dir / f"{seq:012d}.json", text)
        self._seqs.append(seq)
        self._sizes[seq] = len(text)
        self.bytes += len(text)
        self._save_state()

    def _remove(self, seq: int) -> None:
        (self.dir / f"{seq:012d}.json").unlink(missing_ok=True)
        self.bytes -= self._sizes.pop(seq, 0)

    def peek(self) -> dict[str, Any] | None:
        while self._seqs:
            path = self.dir / f"{self._seqs[0]:012d}.json"
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                self._remove(self._seqs.pop(0))  # torn or removed file: skip it, count it
                self.dropped += 1
                continue
            if isinstance(data, dict):
                return data
            self._remove(self._seqs.pop(0))
        return None

    def pop(self, seq: int) -> None:
        if self._seqs and self._seqs[0] == seq:
            self._remove(self._seqs.pop(0))
