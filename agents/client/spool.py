"""Bounded on-disk FIFO of reports waiting for the portal.

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
    def __init__(self, directory: Path, max_reports: int = 10_000, fsync: bool = True) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_reports = max_reports
        self.fsync = fsync
        state = self._load_state()
        self.next_seq: int = int(state.get("next_seq", 1))
        self.dropped: int = int(state.get("dropped", 0))
        self._seqs: list[int] = sorted(
            int(p.stem) for p in self.dir.glob("*.json") if p.stem.isdigit()
        )

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
        while len(self._seqs) >= self.max_reports:
            oldest = self._seqs.pop(0)
            (self.dir / f"{oldest:012d}.json").unlink(missing_ok=True)
            self.dropped += 1
        self._write(self.dir / f"{seq:012d}.json", json.dumps(report, separators=(",", ":")))
        self._seqs.append(seq)
        self._save_state()

    def peek(self) -> dict[str, Any] | None:
        while self._seqs:
            path = self.dir / f"{self._seqs[0]:012d}.json"
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                self._seqs.pop(0)  # torn or removed file: skip it, count it
                self.dropped += 1
                continue
            if isinstance(data, dict):
                return data
            self._seqs.pop(0)
        return None

    def pop(self, seq: int) -> None:
        if self._seqs and self._seqs[0] == seq:
            self._seqs.pop(0)
            (self.dir / f"{seq:012d}.json").unlink(missing_ok=True)
