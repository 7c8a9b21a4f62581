"""Every systemd unit (agents' and the portal's) passes ``systemd-analyze verify``.

verify refuses a unit whose ExecStart binary is missing, and on this machine
/usr/bin/gpupool-agent and /opt/gpupool/venv do not exist: the test verifies a copy in which
only those binary paths point at a stub executable; every other line is verified as
shipped, and any warning (an unknown key, a bad value) fails the test.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from agents import sdnotify

ROOT = Path(__file__).resolve().parents[2]
UNITS = sorted([*(ROOT / "agents/packaging/systemd").glob("*.service"),
                *(ROOT / "docs/deploy/systemd").glob("*.service")])
BINARIES = re.compile(r"/usr/bin/gpupool-agent|/opt/gpupool/venv/bin/[a-z]+")


def _analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        if os.environ.get("REQUIRE_SERVICES"):
            pytest.fail("systemd-analyze missing (apt-get install systemd)")
        pytest.skip("systemd-analyze missing")
    return found


def test_there_are_five_units() -> None:
    assert {u.name for u in UNITS} == {
        "gpupool-agent-node.service", "gpupool-agent-fabric.service", "gpupool-web.service",
        "gpupool-worker.service", "gpupool-beat.service"}


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_unit_verifies(unit: Path, tmp_path: Path) -> None:
    analyze = _analyze()
    stub = tmp_path / "stub"
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    copy = tmp_path / unit.name
    copy.write_text(BINARIES.sub(str(stub), unit.read_text()))
    done = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", done.stderr


def test_agent_units_are_hardened_and_watched() -> None:
    for unit in [u for u in UNITS if u.name.startswith("gpupool-agent")]:
        text = unit.read_text()
        for line in ("Type=notify", "ProtectSystem=strict", "NoNewPrivileges=yes",
                     "PrivateTmp=yes", "Restart=on-failure", "WatchdogSec=60s"):
            assert line in text, (unit.name, line)
        assert re.search(r"^CapabilityBoundingSet=CAP_", text, re.M), unit.name


def _listen(tmp_path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify"))
    sock.settimeout(2)
    return sock


def test_sd_notify_ready_watchdog_stopping(tmp_path: Path) -> None:
    sock = _listen(tmp_path)
    now = [100.0]
    n = sdnotify.Notifier({"NOTIFY_SOCKET": str(tmp_path / "notify"),
                           "WATCHDOG_USEC": "20000000"}, clock=lambda: now[0])
    assert n.watchdog_interval_s == 10.0
    assert n.ready("running")
    assert sock.recv(256) == b"READY=1\nSTATUS=running"
    assert n.watchdog()
    assert sock.recv(256) == b"WATCHDOG=1"
    now[0] += 5
    assert not n.watchdog()  # within half the period: no second ping
    now[0] += 6
    assert n.watchdog()
    assert sock.recv(256) == b"WATCHDOG=1"
    assert n.stopping()
    assert sock.recv(256) == b"STOPPING=1"


def test_sd_notify_is_a_no_op_outside_systemd() -> None:
    n = sdnotify.Notifier({})
    assert not n.enabled and not n.ready() and not n.watchdog()


def test_sd_notify_abstract_socket_address() -> None:
    assert sdnotify._address("@gpupool/notify") == b"\0gpupool/notify"
    assert sdnotify._address("/run/notify") == "/run/notify"
