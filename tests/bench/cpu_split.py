"""CPU seconds per process group of a live ``Stack`` (``/proc/<pid>/stat``), for benches.

Groups: ``web`` (uvicorn and its worker processes), ``workers`` (Celery), ``beat``,
``simulator`` (``agents.sim.fleet``), ``postgres`` (the backends connected to the stack's
database; a backend that exits inside the window takes its CPU with it, and the pools
keep theirs open) and ``redis`` (the stack's private server). Every process the stack
spawns leads its own process group, so a group is "processes whose pgid is that pid".
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(process group, user + system CPU seconds) of ``pid``; None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[2]), (int(fields[11]) + int(fields[12])) / TICK


def _all_pids() -> Iterable[int]:
    return (int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit())


def group_cpu(groups: dict[str, list[int]], backends: list[int]) -> dict[str, float]:
    """CPU seconds so far of each named group of process-group leaders, plus the
    PostgreSQL ``backends`` (pids) as ``postgres``."""
    leader_to_name = {pid: name for name, pids in groups.items() for pid in pids}
    out = {name: 0.0 for name in groups}
    for pid in _all_pids():
        got = _stat(pid)
        if got is not None and got[0] in leader_to_name:
            out[leader_to_name[got[0]]] += got[1]
    out["postgres"] = sum(s[1] for pid in backends if (s := _stat(pid)) is not None)
    return out


class CpuMeter:
    """``start()`` then ``stop()``: CPU seconds used per group in between."""

    def __init__(self, groups: dict[str, list[int]], backends: Iterable[int]) -> None:
        self.groups, self.backends = groups, list(backends)
        self.before: dict[str, float] = {}
        self.pg_before: dict[int, float] = {}

    def start(self) -> None:
        self.before = group_cpu(self.groups, [])
        self.pg_before = {pid: s[1] for pid in self.backends if (s := _stat(pid))}

    def stop(self, backends: Iterable[int]) -> dict[str, float]:
        after = group_cpu(self.groups, [])
        used = {k: after[k] - self.before.get(k, 0.0) for k in self.groups}
        pg = 0.0
        for pid in backends:  # new backends count from zero
            if (s := _stat(pid)) is not None:
                pg += s[1] - self.pg_before.get(pid, 0.0)
        used["postgres"] = pg
        return used
