"""The ``gpupool`` CLI against a live portal (pytest-django's ``live_server``): every
command once, and every error path with its exit code and the server's own message."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from agents.gpupoolcli import waiting
from agents.gpupoolcli.main import cli
from portal.leasing.models import Lease, Quota
from portal.tenants.models import Role
from portal.tenants.services import api_key_create
from tests.portal.factories import add_member, make_tenant

pytestmark = [pytest.mark.services("postgres"), pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]
DEAD_URL = "http://127.0.0.1:18121"  # nothing listens there (this task's spare port)


@pytest.fixture
def portal(live_server: Any, tmp_path: Path) -> dict[str, str]:
    """A pool of 2 H100 nodes × 8, tenant acme with a member and her API key."""
    from portal.inventory.generator import ClusterSpec, cluster_generate

    cluster_generate(actor=None, spec=ClusterSpec(nodes=2, gpus_per_node=8, nodes_per_leaf=2,
                                                  spines=1, model="H100"))
    tenant = make_tenant("acme")
    Quota.objects.create(tenant=tenant, gpu_model="H100", max_gpus=16, max_lease_hours=48)
    alice = add_member(tenant, "alice", Role.ADMIN)
    issued = api_key_create(actor=alice, name="cli", tenant=tenant)
    return {"GPUPOOL_URL": live_server.url, "GPUPOOL_API_KEY": issued.secret,
            "XDG_CONFIG_HOME": str(tmp_path / "config"), "LANG": "C.UTF-8", "LC_ALL": "",
            "LANGUAGE": "", "GPUPOOL_PROFILE": "default"}


@pytest.fixture
def agents_running() -> Iterator[None]:
    """What beat, the workers and the simulated agents do, in a thread, while the CLI
    waits: leases go queued → provisioning → active."""
    from django.db import connection

    from portal.fleet.services import simulate_apply
    from portal.inventory.models import Node
    from portal.leasing.lifecycle.reconcile import check_leases_on, reconcile_once

    stop = threading.Event()

    def loop() -> None:
        try:
            while not stop.wait(0.2):
                reconcile_once()
                nodes = list(Node.objects.all())
                for node in nodes:
                    simulate_apply(node=node)
                check_leases_on([n.pk for n in nodes])
        finally:
            connection.close()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(timeout=10)


def run(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_lease_lifecycle_through_every_lease_command(portal: dict[str, str],
                                                     agents_running: None,
                                                     tmp_path: Path) -> None:
    created = as_json(run(portal, "lease", "create", "--gpus", "8", "--model", "H100",
                          "--hours", "1", "--wait", "--interval", "0.2", "-o", "json"))
    assert created["state"] == "active" and created["id"]
    lease_id = created["id"]
    listed = as_json(run(portal, "lease", "ls", "-o", "json"))
    assert [row["id"] for row in listed] == [lease_id]
    shown = as_json(run(portal, "lease", "show", lease_id, "-o", "json"))
    assert shown["total_gpus"] == 8.0
    assert "state: active" in run(portal, "lease", "show", lease_id, "-o", "yaml").stdout
    assert lease_id in run(portal, "lease", "ls").stdout  # the table

    ssh = run(portal, "lease", "ssh", lease_id)
    assert ssh.exit_code == 0 and ssh.stdout.startswith(f"ssh lease-{lease_id.replace('-', '')[:12]}@")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/ssh-args\nexit 7\n')
    (bin_dir / "ssh").chmod(0o755)
    ran = run({**portal, "PATH": f"{bin_dir}:{os.environ['PATH']}"}, "lease", "ssh", lease_id,
              "--run", "--", "nvidia-smi")
    assert ran.exit_code == 7  # ssh's own exit status
    assert (tmp_path / "ssh-args").read_text().split() == [ssh.stdout.split()[1], "nvidia-smi"]
    env = run(portal, "lease", "env", lease_id)
    assert env.exit_code == 0, env.output
    assert "export NCCL_IB_HCA=" in env.stdout and "export UCX_NET_DEVICES=" in env.stdout

    before = shown["end_at"]
    extended = as_json(run(portal, "lease", "extend", lease_id, "--hours", "1", "-o", "json"))
    assert extended["end_at"] > before
    released = as_json(run(portal, "lease", "release", lease_id, "-o", "json"))
    assert released["state"] in ("releasing", "ended")
    assert Lease.objects.get(pk=lease_id).state in ("releasing", "ended")


def test_cancel_a_booking_and_quote(portal: dict[str, str]) -> None:
    in_30_days = (datetime.now(UTC) + timedelta(days=30)).replace(microsecond=0).isoformat()
    quote = as_json(run(portal, "quote", "--gpus", "8", "--model", "H100", "--hours", "2",
                        "-o", "json"))
    assert quote["fits_quota"] is True and "price" in quote
    booked = as_json(run(portal, "lease", "create", "--gpus", "2", "--hours", "1",
                         "--start-at", in_30_days, "-o", "json"))
    cancelled = as_json(run(portal, "lease", "cancel", booked["id"], "--reason", "test",
                            "-o", "json"))
    assert cancelled["state"] == "cancelled"


def test_usage_and_invoices(portal: dict[str, str], tmp_path: Path) -> None:
    from portal.billing.services import invoice_refresh
    from portal.tenants.models import Tenant

    month = datetime.now(UTC).date().replace(day=1)
    invoice_refresh(tenant=Tenant.objects.get(slug="acme"), month=month)
    quotas = as_json(run(portal, "usage", "-o", "json"))
    assert quotas[0]["gpu_model"] == "H100" and quotas[0]["max_gpus"] == 16
    export = run(portal, "usage", "export", "--type", "csv")
    assert export.exit_code == 0, export.output
    assert export.stdout.splitlines()[0].startswith("record_id,tenant,lease_id")
    invoices = as_json(run(portal, "invoice", "ls", "-o", "json"))
    assert [row["month"] for row in invoices] == [month.isoformat()]
    target = tmp_path / "invoice.csv"
    saved = run(portal, "invoice", "download", month.strftime("%Y-%m"), "-f", str(target))
    assert saved.exit_code == 0, saved.output
    assert target.read_text().splitlines()[0].startswith("kind,lease_id,description")
    named = run(portal, "invoice", "download", month.strftime("%Y-%m"), "-f", "-")
    assert "total," in named.stdout
    missing = run(portal, "invoice", "download", "2020-01")
    assert missing.exit_code == 3 and "No such invoice." in missing.stderr
    assert run(portal, "invoice", "download", "January").exit_code == 2


def test_unknown_lease_exits_3_with_the_servers_message(portal: dict[str, str]) -> None:
    result = run(portal, "lease", "show", "00000000-0000-0000-0000-000000000000")
    assert result.exit_code == 3
    assert "No such lease." in result.stderr and result.stdout == ""


def test_messages_in_chinese_when_the_locale_says_so(portal: dict[str, str]) -> None:
    result = run({**portal, "LANG": "zh_CN.UTF-8"}, "lease", "show", "no-such-id")
    assert result.exit_code == 3
    assert "错误：租约不存在。" in result.stderr  # our prefix, the server's message


def test_bad_api_key_exits_4(portal: dict[str, str]) -> None:
    result = run({**portal, "GPUPOOL_API_KEY": "gpk_000000000000_wrong"}, "lease", "ls")
    assert result.exit_code == 4 and result.stderr.startswith("Error: ")


def test_no_key_at_all_exits_4(portal: dict[str, str]) -> None:
    result = run({**portal, "GPUPOOL_API_KEY": ""}, "lease", "ls")
    assert result.exit_code == 4 and "gpupool login" in result.stderr


def test_server_down_exits_5(portal: dict[str, str]) -> None:
    result = run({**portal, "GPUPOOL_URL": DEAD_URL}, "lease", "ls")
    assert result.exit_code == 5 and "Cannot reach" in result.stderr


def test_bad_input_names_the_field(portal: dict[str, str]) -> None:
    result = run(portal, "lease", "create", "--gpus", "999", "--hours", "1")
    assert result.exit_code == 1
    assert "gpu_count:" in result.stderr and "Invalid input." in result.stderr
    assert not Lease.objects.exists()


def test_invalid_output_format_is_a_usage_error(portal: dict[str, str]) -> None:
    result = run(portal, "lease", "ls", "-o", "xml")
    assert result.exit_code == 2 and "xml" in result.stderr


def test_ctrl_c_while_waiting_exits_130_and_leaves_the_order(
        portal: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupt(_seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(waiting, "pause", interrupt)
    result = run(portal, "lease", "create", "--gpus", "2", "--hours", "1", "--wait")
    assert result.exit_code == 130 and "gpupool lease show" in result.stderr
    lease = Lease.objects.get()
    assert lease.state not in ("cancelled", "rejected", "failed")


def test_login_stores_the_key_mode_0600_and_later_commands_use_it(
        portal: dict[str, str]) -> None:
    key, url = portal["GPUPOOL_API_KEY"], portal["GPUPOOL_URL"]
    bare = {**portal, "GPUPOOL_API_KEY": "", "GPUPOOL_URL": ""}
    result = run(bare, "--profile", "work", "login", "--url", url, "--key", key, "-o", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["username"] == "alice"
    path = Path(portal["XDG_CONFIG_HOME"]) / "gpupool" / "config.ini"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and key in path.read_text()
    assert run({**bare, "GPUPOOL_PROFILE": "work"}, "lease", "ls", "-o", "json").exit_code == 0
    refused = run(bare, "--profile", "other", "login", "--url", url, "--key", "gpk_x_bad")
    assert refused.exit_code == 4 and "[other]" not in path.read_text()


def test_help_on_every_command_and_shell_completion() -> None:
    def walk(group: Any, path: list[str]) -> Iterator[list[str]]:
        yield path
        for name, command in getattr(group, "commands", {}).items():
            yield from walk(command, [*path, name])

    paths = list(walk(cli, []))
    assert len(paths) > 15
    for path in paths:
        result = CliRunner().invoke(cli, [*path, "--help"])
        assert result.exit_code == 0 and "Usage:" in result.stdout, path
    completion = CliRunner().invoke(cli, ["completion", "bash"])
    assert "_GPUPOOL_COMPLETE" in completion.stdout


def test_the_installed_console_script(portal: dict[str, str]) -> None:
    script = ROOT / ".venv" / "bin" / "gpupool"
    if not script.exists():
        pytest.skip("no .venv/bin/gpupool (make venv installs it)")
    env = {**os.environ, **portal, "PYTHONPATH": str(ROOT)}
    listed = subprocess.run([str(script), "lease", "ls", "-o", "json"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []
    missing = subprocess.run([str(script), "lease", "show", "nope"], env=env,
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 3 and "No such lease." in missing.stderr


def test_wait_gives_up_with_exit_6_and_the_order_stays(portal: dict[str, str]) -> None:
    result = run(portal, "lease", "create", "--gpus", "2", "--hours", "1", "--wait",
                 "--wait-timeout", "0")
    assert result.exit_code == 6 and "Gave up waiting" in result.stderr
    assert Lease.objects.count() == 1


def test_a_lease_that_ends_while_waited_for_exits_1(portal: dict[str, str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    def cancel_meanwhile(_seconds: float) -> None:
        lease = Lease.objects.get()
        assert run(portal, "lease", "cancel", str(lease.pk)).exit_code == 0

    monkeypatch.setattr(waiting, "pause", cancel_meanwhile)
    result = run(portal, "lease", "create", "--gpus", "2", "--hours", "1", "--wait")
    assert result.exit_code == 1 and "ended as cancelled" in result.stderr
