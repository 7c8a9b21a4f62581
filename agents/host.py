"""The host, behind injectable interfaces: facts from a procfs root (``--proc-root``,
default ``/proc``) and the commands the agent runs (``HostCommands``, real or fake)."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass
class HostSample:
    hostname: str
    cpus: int | None = None
    memory_total_bytes: int | None = None
    memory_available_bytes: int | None = None
    kernel: str | None = None
    uptime_s: float | None = None
    load1: float | None = None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


class HostCollector:
    def __init__(self, proc_root: Path | str = "/proc", hostname: str | None = None) -> None:
        self.proc = Path(proc_root)
        self.hostname = hostname

    def collect(self) -> HostSample:
        p = self.proc
        host = HostSample(
            hostname=self.hostname or _read(p / "sys/kernel/hostname") or socket.gethostname()
        )
        host.kernel = _read(p / "sys/kernel/osrelease")
        cpuinfo = _read(p / "cpuinfo")
        if cpuinfo is not None:
            host.cpus = sum(1 for line in cpuinfo.splitlines() if line.startswith("processor"))
        meminfo = _read(p / "meminfo") or ""
        for line in meminfo.splitlines():
            key, _, rest = line.partition(":")
            fields = rest.split()
            if not fields or not fields[0].isdigit():
                continue
            value = int(fields[0]) * (1024 if fields[1:] == ["kB"] else 1)
            if key == "MemTotal":
                host.memory_total_bytes = value
            elif key == "MemAvailable":
                host.memory_available_bytes = value
        uptime = _read(p / "uptime")
        if uptime:
            host.uptime_s = float(uptime.split()[0])
        loadavg = _read(p / "loadavg")
        if loadavg:
            host.load1 = float(loadavg.split()[0])
        return host


def write_fake_proc(root: Path, hostname: str, cpus: int = 64, mem_gib: int = 2048) -> None:
    """A minimal fake procfs for tests and the simulator."""
    (root / "sys/kernel").mkdir(parents=True, exist_ok=True)
    (root / "sys/kernel/hostname").write_text(hostname + "\n")
    (root / "sys/kernel/osrelease").write_text("6.1.0-18-amd64\n")
    (root / "cpuinfo").write_text(
        "".join(f"processor\t: {i}\nmodel name\t: Fake CPU\n\n" for i in range(cpus))
    )
    kb = mem_gib * 1024 * 1024
    (root / "meminfo").write_text(
        f"MemTotal:       {kb} kB\nMemFree:        {kb // 2} kB\nMemAvailable:   {kb // 2} kB\n"
    )
    (root / "uptime").write_text("12345.67 98765.43\n")
    (root / "loadavg").write_text("0.50 0.40 0.30 1/234 5678\n")


# --- commands on the host -----------------------------------------------------------
# Every subprocess the agent runs on its host (``loginctl``, ``pkill``, ``kill``, ``ip``)
# goes through a ``HostCommands``: the real one only where the agent manages the real
# host (access root ``/``); a recording fake everywhere else (tests, demo, temp roots).


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    stdout: str = ""
    stderr: str = ""


class HostCommands(Protocol):
    def run(self, argv: Sequence[str]) -> CommandResult: ...


TIMED_OUT = 124  # the exit status of a command that ran past its limit (as timeout(1))


class RealHost:
    """Runs the command on this machine (never raises for a non-zero exit); a command
    past ``timeout_s`` is killed and answers ``TIMED_OUT``."""

    def __init__(self, timeout_s: float = 30.0) -> None:
        self.timeout_s = timeout_s

    def run(self, argv: Sequence[str]) -> CommandResult:
        try:
            done = subprocess.run(list(argv), check=False, capture_output=True, text=True,
                                  timeout=self.timeout_s)  # fmt: skip
        except subprocess.TimeoutExpired:
            return CommandResult(TIMED_OUT, "", f"timed out after {self.timeout_s:g} s")
        except OSError as exc:
            return CommandResult(127, "", f"{type(exc).__name__}: {exc}")
        return CommandResult(done.returncode, done.stdout, done.stderr)


Handler = Callable[[tuple[str, ...]], CommandResult | None]


@dataclass
class FakeHost:
    """Records every command; ``handlers`` may act on one (e.g. a fake NVML forgetting
    the processes a ``kill`` ended) and answer it; otherwise the answer is exit 0."""

    calls: list[tuple[str, ...]] = field(default_factory=list)
    handlers: list[Handler] = field(default_factory=list)

    def run(self, argv: Sequence[str]) -> CommandResult:
        call = tuple(argv)
        self.calls.append(call)
        for handler in self.handlers:
            result = handler(call)
            if result is not None:
                return result
        return CommandResult(0)


def host_for_root(root: Path | str) -> HostCommands:
    """The real host only for the real root ``/``; any other root is a sandbox."""
    return RealHost() if Path(root).resolve() == Path("/") else FakeHost()


def checked(result: CommandResult, argv: Sequence[str]) -> CommandResult:
    """``result``, or ``OSError`` naming the command and its stderr if it failed."""
    if result.returncode != 0:
        raise OSError(f"{' '.join(argv)}: exit {result.returncode}: {result.stderr.strip()}")
    return result
