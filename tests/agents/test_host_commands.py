"""Every command the agent runs on its host goes through ``agents.host.HostCommands``; in a
sandbox root (tests, demo, ``--access-root`` temp dirs) that is a recording fake."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agents.host import FakeHost, RealHost, host_for_root
from agents.node.access import FileAccess, Grant
from agents.node.ipoib import IpLinkIpoib

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA alice@example.org"


@pytest.fixture
def no_real_host(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"the agent ran a command on the real host: {args!r}")

    for name in ("run", "Popen", "call", "check_call", "check_output"):
        monkeypatch.setattr(subprocess, name, refuse)
    monkeypatch.setattr(os, "system", refuse)


def test_revoke_never_touches_the_real_host(tmp_path: Path, no_real_host: None) -> None:
    access = FileAccess(tmp_path / "root", chown=False)  # no host given: the default
    access.apply(Grant("ls_1", "lease-1", (KEY,), (0, 1)))
    access.revoke("lease-1")
    assert isinstance(access.host, FakeHost)
    assert access.host.calls == [("loginctl", "terminate-user", "lease-1"),
                                 ("pkill", "-KILL", "-u", "lease-1")]
    assert access.present() == {}


def test_iplink_ipoib_runs_ip_through_the_host(tmp_path: Path, no_real_host: None) -> None:
    host = FakeHost()
    mgr = IpLinkIpoib(tmp_path, host)
    assert mgr.create("ib0", 0x0101) == "ib0.8101"
    mgr.remove("ib0", 0x0101)
    assert host.calls == [
        ("ip", "link", "add", "link", "ib0", "name", "ib0.8101", "type", "ipoib", "pkey",
         "0x8101"),
        ("ip", "link", "delete", "ib0.8101")]
    assert isinstance(IpLinkIpoib(tmp_path).host, FakeHost)  # no host given: never the real one


def test_iplink_failure_is_an_error_naming_the_command(tmp_path: Path) -> None:
    from agents.host import CommandResult

    host = FakeHost(handlers=[lambda call: CommandResult(2, "", "RTNETLINK: File exists")])
    with pytest.raises(OSError, match="ip link add .* exit 2: RTNETLINK: File exists"):
        IpLinkIpoib(tmp_path, host).create("ib0", 0x0101)


def test_only_the_real_root_gets_the_real_host(tmp_path: Path) -> None:
    assert isinstance(host_for_root("/"), RealHost)
    assert isinstance(host_for_root(tmp_path), FakeHost)


def test_real_host_reports_a_missing_command_without_raising() -> None:
    result = RealHost().run(["/nonexistent/gpupool-no-such-command"])
    assert result.returncode == 127
    assert "FileNotFoundError" in result.stderr


def test_node_agent_built_for_a_temp_root_never_gets_the_real_host(tmp_path: Path,
                                                                   no_real_host: None) -> None:
    from agents import config
    from agents.cli import build_applier, build_sampler
    from agents.nvml.fake import FakeNvml

    hw = {**config.NODE_DEFAULTS["hardware"], "sysfs_root": str(tmp_path / "sys"),
          "proc_root": str(tmp_path / "proc"), "fake_gpus": "h100x2",
          "access_root": str(tmp_path / "root"), "ipoib": "iplink"}
    sampler, api = build_sampler(hw["sysfs_root"], hw["proc_root"], hw["fake_gpus"])
    applier = build_applier(hw, sampler, api)
    host = applier.access.host  # type: ignore[attr-defined]
    assert isinstance(host, FakeHost)
    assert applier.cleaner is not None and applier.cleaner.host is host
    assert applier.ipoib.host is host  # type: ignore[union-attr]
    assert isinstance(api, FakeNvml)
    api.add_process(0, pid=777, owner="lease-1")
    applier.apply({"generation": 1, "partitions": [], "access_grants": [
        {"lease_id": "ls_1", "account": "lease-1", "gpu_indices": [0],
         "ssh_authorized_keys": [KEY]}]})
    applier.apply({"generation": 2, "partitions": [], "access_grants": []})
    assert ("pkill", "-KILL", "-u", "lease-1") in host.calls
    assert applier.observed()["gpu_cleaning"][0]["clean"] is True
