"""``gpupool-agent doctor``: one test per failure it names, and a healthy host."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agents import config, doctor
from agents.cli import main
from agents.doctor import hostchecks, portalchecks
from agents.nvml import binding
from agents.nvml.fake import FakeNvml
from agents.sysfs.faketree import FakeSysfsWriter, gpu_node_hcas


def _statuses(found: list[doctor.Finding], check: str) -> list[str]:
    return [f.status for f in found if f.check == check]


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    writer = FakeSysfsWriter(tmp_path / "sys")
    for hca in gpu_node_hcas(1, 1):
        writer.add(hca)
    return tmp_path / "sys"


def _portal(skew_s: float = 0.0, status: int = 200) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        def date_time_string(self, timestamp: float | None = None) -> str:
            import time

            return formatdate(time.time() + skew_s, usegmt=True)

        def do_GET(self) -> None:
            self.send_response(status if self.path == "/healthz" else 404)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def portal() -> Iterator[str]:
    server, url = _portal()
    yield url
    server.shutdown()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- NVML / GPUs -------------------------------------------------------------------------
def test_nvml_that_does_not_load_is_a_failure_in_words() -> None:
    api = FakeNvml("h100x8")
    api.init_error = binding.NVML_ERROR_LIBRARY_NOT_FOUND
    [finding] = hostchecks.check_gpus("", api)
    assert (finding.check, finding.status) == ("nvml", "fail")
    assert "NVML did not load" in finding.message and "driver" in finding.fix


def test_nvml_without_gpus_fails_the_gpu_check() -> None:
    api = FakeNvml("h100x8")
    api.gpus.clear()
    found = hostchecks.check_gpus("", api)
    assert _statuses(found, "nvml") == ["ok"] and _statuses(found, "gpus") == ["fail"]


def test_fake_gpus_are_visible() -> None:
    found = hostchecks.check_gpus("h100x8")
    assert [f.status for f in found] == ["ok", "ok"] and "8 GPU" in found[1].message


# --- InfiniBand ----------------------------------------------------------------------------
def test_missing_sysfs_root_fails(tmp_path: Path) -> None:
    [finding] = hostchecks.check_infiniband(tmp_path / "nope")
    assert finding.status == "fail" and "does not exist" in finding.message


def test_sysfs_without_infiniband_fails(tmp_path: Path) -> None:
    [finding] = hostchecks.check_infiniband(tmp_path)
    assert finding.status == "fail" and "no InfiniBand port" in finding.message


def test_port_not_active_warns_and_names_it(sysfs: Path) -> None:
    assert [f.status for f in hostchecks.check_infiniband(sysfs)] == ["ok"]
    state = next(sysfs.glob("class/infiniband/*/ports/1/state"))
    state.write_text("1: DOWN\n")
    [finding] = hostchecks.check_infiniband(sysfs)
    assert finding.status == "warn" and "is DOWN" in finding.message


# --- portal and clock --------------------------------------------------------------------
def test_portal_down_is_a_failure() -> None:
    [finding] = portalchecks.check_portal(f"http://127.0.0.1:{_closed_port()}", timeout_s=2)
    assert finding.status == "fail" and "cannot reach" in finding.message


def test_portal_url_unset_fails() -> None:
    [finding] = portalchecks.check_portal("")
    assert finding.status == "fail" and "portal.url" in finding.message


def test_unhealthy_portal_fails() -> None:
    server, url = _portal(status=503)
    try:
        found = portalchecks.check_portal(url)
    finally:
        server.shutdown()
    assert _statuses(found, "portal") == ["fail"] and "503" in found[0].message


def test_tls_to_a_plain_http_port_is_named_as_tls() -> None:
    server, url = _portal()
    try:
        [finding] = portalchecks.check_portal(url.replace("http:", "https:"), timeout_s=3)
    finally:
        server.shutdown()
    assert finding.status == "fail" and finding.message.startswith("TLS")
    assert "ca_file" in finding.fix


@pytest.mark.parametrize(("skew", "status"), [(0.0, "ok"), (10.0, "warn"), (-120.0, "fail")])
def test_clock_skew_against_the_portal_date_header(skew: float, status: str) -> None:
    server, url = _portal(skew_s=skew)
    try:
        found = portalchecks.check_portal(url)
    finally:
        server.shutdown()
    assert _statuses(found, "portal") == ["ok"]
    assert _statuses(found, "clock") == [status]
    if skew < 0:
        assert "ahead of" in found[1].message  # the portal is behind: this host is ahead


# --- state dir, config, credential, accounts ----------------------------------------------
def test_state_dir_that_is_a_file_fails(tmp_path: Path) -> None:
    (tmp_path / "state").write_text("")
    [finding] = hostchecks.check_state_dir(tmp_path / "state")
    assert finding.status == "fail" and "not a directory" in finding.message


def test_state_dir_that_cannot_be_created_fails(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    [finding] = hostchecks.check_state_dir(tmp_path / "file" / "state")
    assert finding.status == "fail" and "cannot be created" in finding.message


def _as_unprivileged(fn: str, path: Path) -> str:
    """The check's status as ``nobody`` (root writes everywhere), in a forked child; as
    this user when not root."""
    check = getattr(hostchecks, fn)
    if os.geteuid() != 0:
        return str(check(path)[0].status)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: drop to nobody, run the check, report through the pipe
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            os.write(write, check(path)[0].status.encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        status = pipe.read()
    os.waitpid(pid, 0)
    return status


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory anyone may traverse (pytest's tmp_path is 0700: nobody could not)."""
    path = Path(tempfile.mkdtemp(prefix="gpupool-doctor-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_unwritable_state_dir_fails(open_dir: Path) -> None:
    tmp_path = open_dir
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    if os.geteuid() != 0:
        os.chmod(state, 0o555)
    assert hostchecks.check_state_dir(tmp_path)[0].status == "ok" or os.geteuid() != 0
    assert _as_unprivileged("check_state_dir", state) == "fail"


def test_lease_accounts_unmanageable_without_write_access(open_dir: Path) -> None:
    tmp_path = open_dir
    for rel in ("etc/systemd/system", "home"):
        (tmp_path / rel).mkdir(parents=True)
    (tmp_path / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    if os.geteuid() == 0:
        assert hostchecks.check_accounts(tmp_path)[0].status == "ok"
    else:
        os.chmod(tmp_path / "etc/passwd", 0o444)
    assert _as_unprivileged("check_accounts", tmp_path) == "fail"


def test_missing_access_root_fails(tmp_path: Path) -> None:
    [finding] = hostchecks.check_accounts(tmp_path / "nope")
    assert finding.status == "fail"


def test_world_readable_config_with_a_token_fails(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text('[portal]\nbootstrap_token = "gpb_secret"\n')
    os.chmod(path, 0o644)
    [finding] = hostchecks.check_config_file(path, {})
    assert finding.status == "fail" and "world-readable" in finding.message
    os.chmod(path, 0o640)
    assert hostchecks.check_config_file(path, {})[0].status == "ok"


def test_credential_missing_without_token_fails_and_damaged_fails(tmp_path: Path) -> None:
    assert hostchecks.check_credential(tmp_path, "")[0].status == "fail"
    assert hostchecks.check_credential(tmp_path, "gpb_x")[0].status == "ok"
    (tmp_path / "credential.json").write_text("{not json")
    assert "damaged" in hostchecks.check_credential(tmp_path, "gpb_x")[0].message
    (tmp_path / "credential.json").write_text(json.dumps({"node_id": 7, "credential": "c"}))
    os.chmod(tmp_path / "credential.json", 0o644)
    assert hostchecks.check_credential(tmp_path, "")[0].status == "warn"
    os.chmod(tmp_path / "credential.json", 0o600)
    assert hostchecks.check_credential(tmp_path, "")[0].message == "enrolled as node 7"


def test_fabric_without_writable_partitions_conf_or_opensm(tmp_path: Path) -> None:
    f = dict(config.FABRIC_DEFAULTS["fabric"], partitions_conf=str(tmp_path / "p.conf"),
             opensm_pid_file=str(tmp_path / "opensm.pid"))
    assert hostchecks.check_fabric(f)[0].status == "warn"  # no OpenSM pid file
    (tmp_path / "opensm.pid").write_text("1\n")
    assert hostchecks.check_fabric(f)[0].status == "ok"
    f["partitions_conf"] = str(tmp_path / "missing" / "p.conf")
    assert hostchecks.check_fabric(f)[0].status == "fail"


# --- the command ---------------------------------------------------------------------------
def test_healthy_host_exits_0_in_json(tmp_path: Path, sysfs: Path, portal: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "etc").mkdir()
    cfg = tmp_path / "agent.toml"
    cfg.write_text(f'[portal]\nurl = "{portal}"\n[agent]\nstate_dir = "{tmp_path / "st"}"\n'
                   f'[hardware]\nsysfs_root = "{sysfs}"\nfake_gpus = "h100x8"\n'
                   f'access_root = "{tmp_path}"\n')
    (tmp_path / "st").mkdir()
    (tmp_path / "st/credential.json").write_text('{"node_id": 3, "credential": "x"}')
    os.chmod(tmp_path / "st/credential.json", 0o600)
    assert main(["doctor", "--config", str(cfg), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["healthy"] is True
    assert {f["check"] for f in out["findings"]} >= {
        "nvml", "gpus", "infiniband", "portal", "clock", "state_dir", "config", "credential",
        "accounts"}
    assert all(f["status"] == "ok" for f in out["findings"])


def test_sick_host_exits_1_with_words(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "agent.toml"
    cfg.write_text(f'[portal]\nurl = "http://127.0.0.1:{_closed_port()}"\n'
                   f'[hardware]\nsysfs_root = "{tmp_path / "nosys"}"\nfake_gpus = "h100x8"\n')
    assert main(["doctor", "--config", str(cfg)]) == 1
    out = capsys.readouterr().out
    assert "[FAIL] infiniband" in out and "what to do:" in out and "problem(s) found" in out
