"""A real OpenSM on an ibsim fabric (tests/fixtures/ibnetdiscover/fat-tree-storage.net:
2 spines, 4 leaves, 16 GPU HCAs and 2 storage HCAs). Proves that a lease's nodes - and only
they - join the tenant's partition with the key at P_Key index 0, that storage ports are
limited members of every tenant's key, read back with ``ibsim-run smpquery pkeys <lid>``,
and that members leave afterwards, also when the driver was restarted in between."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agents.fabric.applier import FabricApplier
from agents.fabric.opensm import OpenSmManager, parse_smpquery_pkeys, parse_smpquery_table
from tests.agents.conftest import FIXTURES

pytestmark = pytest.mark.opensm
NET = FIXTURES / "ibnetdiscover" / "fat-tree-storage.net"
STORAGE = ["storage-01", "storage-02"]
TOOLS = ("ibsim", "ibsim-run", "opensm", "smpquery", "ibnetdiscover")


def _require_tools() -> None:
    missing = [t for t in TOOLS if shutil.which(t) is None and not Path("/usr/sbin", t).exists()]
    if missing:
        message = f"missing {', '.join(missing)}: apt-get install opensm ibsim-utils infiniband-diags"
        if os.environ.get("REQUIRE_SERVICES") == "1":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


@dataclass
class Fabric:
    env: dict[str, str]
    conf: Path
    opensm_pid: int
    lids: dict[str, int]  # hostname -> LID
    guids: dict[str, str]  # hostname -> port GUID

    def run(self, *argv: str) -> str:
        proc = subprocess.run(["ibsim-run", *argv], env=self.env, capture_output=True,
                              text=True, timeout=30, check=True)
        return proc.stdout

    def pkeys(self, host: str) -> list[int]:
        return parse_smpquery_pkeys(self.run("smpquery", "pkeys", str(self.lids[host])))

    def table(self, host: str) -> list[int]:
        """The port's P_Key table in index order, empty entries included."""
        return parse_smpquery_table(self.run("smpquery", "pkeys", str(self.lids[host])))

    def manager(self) -> OpenSmManager:
        """A fresh driver, as a restarted agent process would build it."""
        return OpenSmManager(self.conf, pid=self.opensm_pid, diag_prefix=["ibsim-run"],
                             run=lambda argv: subprocess.run(
                                 argv, env=self.env, capture_output=True, text=True,
                                 timeout=30, check=True).stdout)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop exactly this PID: SIGTERM, then SIGKILL if it does not go."""
    if proc.poll() is not None:
        return
    os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)


def _wait(cond, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


CA_RE = re.compile(r'^Ca\s+\d+\s+"H-[0-9a-f]+"\s+#\s+"(\S+) \S+"')
PORT_RE = re.compile(r"^\[1\]\(([0-9a-f]+)\).*# lid (\d+) ")


def parse_cas(text: str) -> tuple[dict[str, int], dict[str, str]]:
    lids: dict[str, int] = {}
    guids: dict[str, str] = {}
    host = None
    for line in text.splitlines():
        if m := CA_RE.match(line):
            host = m.group(1)
        elif host and (m := PORT_RE.match(line)):
            guids[host] = f"0x{int(m.group(1), 16):016x}"
            lids[host] = int(m.group(2))
            host = None
    return lids, guids


@pytest.fixture
def fabric(tmp_path: Path) -> Iterator[Fabric]:
    _require_tools()
    env = {**os.environ, "IBSIM_SOCKNAME": f"gpupool-test-{os.getpid()}"}
    conf = tmp_path / "partitions.conf"
    conf.write_text("Default=0x7fff,ipoib : ALL=limited, SELF=full ;\n")
    procs: list[subprocess.Popen[bytes]] = []
    with contextlib.ExitStack() as stack:
        ibsim_log = stack.enter_context(open(tmp_path / "ibsim.log", "wb"))
        opensm_log = stack.enter_context(open(tmp_path / "opensm.out", "wb"))
        try:
            procs.append(subprocess.Popen(
                ["ibsim", "-n", "-s", str(NET)], env=env, cwd=tmp_path,
                stdin=subprocess.DEVNULL, stdout=ibsim_log, stderr=subprocess.STDOUT))
            _wait(lambda: b"ready" in (tmp_path / "ibsim.log").read_bytes(), 10, "ibsim")
            opensm = subprocess.Popen(
                ["ibsim-run", "opensm", "-f", str(tmp_path / "osm.log"), "-P", str(conf)],
                env=env, cwd=tmp_path, stdin=subprocess.DEVNULL,
                stdout=opensm_log, stderr=subprocess.STDOUT)
            procs.append(opensm)
            _wait(lambda: b"MASTER" in (tmp_path / "opensm.out").read_bytes(), 30, "OpenSM")
            disc = subprocess.run(["ibsim-run", "ibnetdiscover"], env=env, capture_output=True,
                                  text=True, timeout=30, check=True).stdout
            lids, guids = parse_cas(disc)
            assert len(lids) == 18
            yield Fabric(env, conf, opensm.pid, lids, guids)
        finally:
            for proc in reversed(procs):  # opensm first, then ibsim: exactly these PIDs
                _stop(proc)


def _map(generation: int, tenants: dict[str, tuple[int, list[str]]],
         guids: dict[str, str]) -> dict[str, object]:
    return {"generation": generation, "partitions": [
        {"name": name, "pkey": f"0x{pkey:04x}", "ipoib": True,
         "members": [{"guid": guids[h], "membership": "full"} for h in hosts]}
        for name, (pkey, hosts) in tenants.items()]}


def test_lease_partitions_on_real_opensm(fabric: Fabric) -> None:
    a_hosts = ["gpu-node-05", "gpu-node-06"]  # leaf-02
    b_hosts = ["gpu-node-09", "gpu-node-13"]  # leaf-03, leaf-04
    mgr = OpenSmManager(fabric.conf, pid=fabric.opensm_pid, diag_prefix=["ibsim-run"],
                        run=lambda argv: subprocess.run(argv, env=fabric.env, capture_output=True,
                                                        text=True, timeout=30, check=True).stdout)
    applier = FabricApplier(mgr, verify_timeout_s=30)

    # tenant B already has a lease; tenant A is granted one on 2 nodes
    applier.apply(_map(1, {"tenant_b": (0x0102, b_hosts), "tenant_a": (0x0101, a_hosts)},
                       fabric.guids))
    assert applier.observed()["drift"] == []
    assert applier.generation_applied == 1
    tables = {h: fabric.pkeys(h) for h in fabric.lids}
    for host, keys in tables.items():
        if host in a_hosts:
            assert 0x8101 in keys, (host, keys)  # full member of A's key
        else:
            assert all(k & 0x7FFF != 0x0101 for k in keys), (host, keys)
        if host in b_hosts:
            assert 0x8102 in keys
    # the agent's own read-back (by GUID) agrees with the per-LID one
    assert mgr.read_back(set(fabric.guids.values()))[0x0101] == {
        fabric.guids[h]: "full" for h in a_hosts}

    # A's lease ends: the key disappears from those ports, B is untouched
    applier.apply(_map(2, {"tenant_b": (0x0102, b_hosts)}, fabric.guids))
    assert applier.observed()["drift"] == []
    for host in fabric.lids:
        keys = fabric.pkeys(host)
        assert all(k & 0x7FFF != 0x0101 for k in keys), (host, keys)
        assert (0x8102 in keys) == (host in b_hosts)


def _tenant_map(generation: int, tenants: dict[str, tuple[int, list[str]]],
                guids: dict[str, str]) -> dict[str, object]:
    """What the portal sends: tenant ports full with index0, storage ports limited."""
    return {"generation": generation, "partitions": [
        {"name": name, "pkey": f"0x{pkey:04x}", "ipoib": True,
         "members": [{"guid": guids[h], "membership": "full", "index0": True} for h in hosts]
         + [{"guid": guids[s], "membership": "limited"} for s in STORAGE]}
        for name, (pkey, hosts) in tenants.items()]}


A_HOSTS = ["gpu-node-05", "gpu-node-06"]
B_HOSTS = ["gpu-node-09", "gpu-node-13"]


def test_tenant_pkey_at_index_0(fabric: Fabric) -> None:
    """Findings 11.4 and 11.5 on a real OpenSM: every tenant port holds its own key, full,
    at P_Key index 0 (what NCCL uses) and no other tenant key; storage ports hold every
    tenant's key as limited members; every other port holds no tenant key at all."""
    applier = FabricApplier(fabric.manager(), verify_timeout_s=30)
    applier.apply(_tenant_map(1, {"tenant_a": (0x0101, A_HOSTS), "tenant_b": (0x0102, B_HOSTS)},
                              fabric.guids))
    assert applier.observed()["drift"] == []
    own = {**{h: 0x8101 for h in A_HOSTS}, **{h: 0x8102 for h in B_HOSTS}}
    for host in fabric.lids:
        table = fabric.table(host)
        tenant_keys = sorted(k for k in table if k & 0x7FFF not in (0, 0x7FFF))
        if host in own:
            assert table[0] == own[host], (host, table)  # own key, full, at index 0
            assert tenant_keys == [own[host]], (host, table)
        elif host in STORAGE:
            assert tenant_keys == [0x0101, 0x0102], (host, table)  # limited members
        else:
            assert tenant_keys == [], (host, table)


def test_restarted_opensm_driver_removes_stale_members(fabric: Fabric) -> None:
    """Finding 10.9 on a real OpenSM: a driver restarted after tenant A's lease ended
    removes A's members (tenant and storage ports) and verifies it, B untouched."""
    tenants = {"tenant_a": (0x0101, A_HOSTS), "tenant_b": (0x0102, B_HOSTS)}
    FabricApplier(fabric.manager(), verify_timeout_s=30).apply(
        _tenant_map(1, tenants, fabric.guids))
    restarted = FabricApplier(fabric.manager(), verify_timeout_s=30)  # no memory of gen 1
    restarted.apply(_tenant_map(2, {"tenant_b": tenants["tenant_b"]}, fabric.guids))
    assert restarted.observed()["drift"] == []
    for host in fabric.lids:
        keys = fabric.pkeys(host)
        assert all(k & 0x7FFF != 0x0101 for k in keys), (host, keys)
    assert all(fabric.table(h)[0] == 0x8102 for h in B_HOSTS)
    assert all(0x0102 in fabric.pkeys(s) for s in STORAGE)
