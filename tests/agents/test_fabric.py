import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from agents.fabric.applier import FabricApplier
from agents.fabric.base import FakeFabric, PartitionMap, drift
from agents.fabric.opensm import (
    BEGIN,
    END,
    OpenSmManager,
    parse_block,
    parse_smpquery_pkeys,
    parse_smpquery_table,
    render_partitions_conf,
)
from agents.fabric.ufm import UfmManager, parse_pkeys

A1, A2, B1, S1 = (f"0x{n:016x}" for n in (0x100009, 0x10000B, 0x10000D, 0x1000F1))


def pmap(generation: int = 1, storage: bool = True) -> PartitionMap:
    parts = [
        {"name": "tenant_a", "pkey": "0x0101", "ipoib": True,
         "members": [{"guid": A2, "membership": "full"}, {"guid": A1, "membership": "full"}]},
        {"name": "tenant_b", "pkey": "0x0102", "ipoib": True,
         "members": [{"guid": B1, "membership": "full"}]},
    ]
    if storage:
        parts.append({"name": "storage", "pkey": "0x0200", "ipoib": False, "members": [
            {"guid": S1, "membership": "full"}, {"guid": A1, "membership": "limited"},
            {"guid": B1, "membership": "limited"}]})
    return PartitionMap.from_wire({"generation": generation, "partitions": parts})


def test_render_partitions_conf() -> None:
    text = render_partitions_conf(pmap(7))
    assert text.splitlines() == [
        BEGIN,
        "# generation 7",
        "Default=0x7fff,ipoib : ALL=limited, SELF=full ;",
        f"tenant_a=0x0101,ipoib : {A1}=full, {A2}=full ;",
        f"tenant_b=0x0102,ipoib : {B1}=full ;",
        f"storage=0x0200 : {A1}=limited, {B1}=limited, {S1}=full ;",
        END,
    ]
    empty = PartitionMap.from_wire({"generation": 2, "partitions": [
        {"name": "gone", "pkey": "0x0103", "members": []}]})
    assert "gone" not in render_partitions_conf(empty, default_membership="full")
    assert "ALL=full" in render_partitions_conf(empty, default_membership="full")


def test_invalid_partitions_rejected() -> None:
    for bad in ({"name": "x y", "pkey": "0x0101"}, {"name": "d", "pkey": "0x7fff"},
                {"name": "z", "pkey": "0x8000"}):
        with pytest.raises(ValueError, match="invalid partition"):
            PartitionMap.from_wire({"generation": 1, "partitions": [{**bad, "members": []}]})


def test_parse_smpquery() -> None:
    out = ("ibwarn: [1] sim_connect: attached\n"
           "   0: 0xffff 0x8101 0x0000 0x0000 0x0000 0x0000 0x0000 0x0000\n"
           "   8: 0x0000 0x0102 0x0000 0x0000 0x0000 0x0000 0x0000 0x0000\n"
           "64 pkeys capacity for this port\n")
    assert parse_smpquery_pkeys(out) == [0xFFFF, 0x8101, 0x0102]


def test_opensm_apply_atomic_write_and_sighup(tmp_path: Path) -> None:
    flag = tmp_path / "hup"
    child = subprocess.Popen([sys.executable, "-c", (
        "import signal, sys, time\n"
        f"signal.signal(signal.SIGHUP, lambda *a: open({str(flag)!r}, 'w').write('hup'))\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        conf = tmp_path / "opensm/partitions.conf"
        tables = {A1: "   0: 0xffff 0x8101 0x0200\n", A2: "   0: 0x7fff 0x8101\n",
                  B1: "   0: 0xffff 0x8102 0x0200\n", S1: "   0: 0xffff 0x8200\n"}
        mgr = OpenSmManager(conf, pid=child.pid, run=lambda argv: tables[argv[-1]])
        mgr.apply(pmap())
        assert conf.read_text() == render_partitions_conf(pmap())
        assert not list(conf.parent.glob(".*tmp"))  # temp file renamed away
        deadline = time.monotonic() + 5
        # the handler creates the file, then writes: wait for the content, not the name
        while (not flag.exists() or flag.read_text() != "hup") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert flag.read_text() == "hup"
        applier = FabricApplier(mgr, verify_timeout_s=0)
        applier.apply({"generation": 3, "partitions": []})  # read back: drift everywhere
        assert applier.generation_applied == 3
        got = mgr.read_back({A1, B1, S1})
        assert got == {0x0101: {A1: "full"}, 0x0102: {B1: "full"},
                       0x0200: {A1: "limited", B1: "limited", S1: "full"}}
    finally:
        os.kill(child.pid, signal.SIGTERM)
        child.wait(5)


def test_opensm_without_pid_is_an_apply_error(tmp_path: Path) -> None:
    applier = FabricApplier(OpenSmManager(tmp_path / "p.conf", pid_file=tmp_path / "none"))
    applier.apply({"generation": 1, "partitions": []})
    assert applier.generation_applied == 0
    assert "ProcessLookupError" in applier.observed()["apply_errors"][0]["message"]


def test_fake_fabric_and_drift() -> None:
    fake = FakeFabric()
    applier = FabricApplier(fake, verify_timeout_s=0)
    wire = {"generation": 4, "partitions": [
        {"name": "tenant_a", "pkey": "0x0101", "members": [{"guid": A1, "membership": "full"}]}]}
    applier.apply(wire)
    obs = applier.observed()
    assert obs["generation_applied"] == 4
    assert obs["drift"] == []
    assert obs["manager"] == "fake"
    fake.state[0x0101].pop(A1)  # someone removed it behind our back
    assert applier.verify() == [
        {"pkey": "0x0101", "guid": A1, "expected": "full", "actual": "absent"}]
    assert drift({1: {A1: "full"}}, {1: {A1: "limited"}}, {A1})[0]["actual"] == "limited"


class FakeUfm:
    def __init__(self) -> None:
        self.pkeys: dict[str, dict[str, object]] = {"0x7fff": {"guids": []}}
        self.calls: list[tuple[str, object]] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        assert request.headers["Authorization"].startswith("Basic ")
        path = request.url.path
        body = json.loads(request.content) if request.content else None
        self.calls.append((path, body))
        if path == "/ufmRest/app/ufm_version":
            return httpx.Response(200, json={"ufm_release_version": "6.15.0"})
        if path == "/ufmRest/resources/pkeys/" and request.method == "GET":
            assert request.url.params["guids_data"] == "true"
            return httpx.Response(200, json=self.pkeys)
        if path == "/ufmRest/resources/pkeys/add":
            # UFM names a key made over REST "api_pkey_0x…" (seen in UFM 6.11 listings)
            self.pkeys.setdefault(body["pkey"], {"guids": [], "ip_over_ib": body["ip_over_ib"],
                                                 "partition": f"api_pkey_{int(body['pkey'], 16):#x}"})
            return httpx.Response(200, json={})
        if path == "/ufmRest/resources/pkeys":
            entry = self.pkeys.setdefault(body["pkey"], {"guids": []})
            for g in body["guids"]:
                assert len(g) == 16
                assert not g.startswith("0x")
                entry["guids"] = [x for x in entry["guids"] if x["guid"] != g] + [  # type: ignore[union-attr]
                    {"guid": g, "membership": body["membership"], "index0": body["index0"]}]
            return httpx.Response(200, json={})
        if path == "/ufmRest/actions/remove_guids_from_pkey":
            entry = self.pkeys[body["pkey"]]
            entry["guids"] = [x for x in entry["guids"] if x["guid"] not in body["guids"]]  # type: ignore[union-attr]
            return httpx.Response(200, json={})
        return httpx.Response(404)


def test_ufm_driver_payloads_and_read_back() -> None:
    ufm = FakeUfm()
    mgr = UfmManager("https://ufm.test", "admin", "secret",
                     transport=httpx.MockTransport(ufm.handle))
    assert mgr.health() == "6.15.0"
    applier = FabricApplier(mgr, verify_timeout_s=0)
    applier.apply({"generation": 1, "partitions": [
        {"name": p.name, "pkey": f"0x{p.pkey:04x}", "ipoib": p.ipoib,
         "members": [{"guid": g, "membership": m} for g, m in p.members]}
        for p in pmap().partitions]})
    assert applier.observed()["drift"] == []
    posted = [b for path, b in ufm.calls if path == "/ufmRest/resources/pkeys"]
    assert {"pkey": "0x0101", "guids": ["0000000000100009", "000000000010000b"],
            "membership": "full", "index0": False, "ip_over_ib": True} in posted
    # lease of tenant A ends on one node: its GUID is removed from 0x0101
    applier.apply({"generation": 2, "partitions": [
        {"name": "tenant_a", "pkey": "0x0101", "members": [{"guid": A2, "membership": "full"}]}]})
    removed = [b for path, b in ufm.calls if path.endswith("remove_guids_from_pkey")]
    assert {"pkey": "0x0101", "guids": ["0000000000100009"]} in removed
    assert parse_pkeys(ufm.pkeys)[0x0101] == {A2: "full"}
    assert applier.observed()["drift"] == []
    assert applier.generation_applied == 2


def wire(pm: PartitionMap, index0: frozenset[str] = frozenset()) -> dict[str, object]:
    return {"generation": pm.generation, "partitions": [
        {"name": p.name, "pkey": f"0x{p.pkey:04x}", "ipoib": p.ipoib,
         "members": [{"guid": g, "membership": m, "index0": m == "full" and g in index0}
                     for g, m in p.members]}
        for p in pm.partitions]}


def storage_map(generation: int = 1) -> dict[str, object]:
    """Tenant partitions with the storage port S1 as a limited member of each, and every
    tenant port asking for its key at index 0 (what the portal sends)."""
    return {"generation": generation, "partitions": [
        {"name": "tenant_a", "pkey": "0x0101", "members": [
            {"guid": A1, "membership": "full", "index0": True},
            {"guid": A2, "membership": "full", "index0": True},
            {"guid": S1, "membership": "limited"}]},
        {"name": "tenant_b", "pkey": "0x0102", "members": [
            {"guid": B1, "membership": "full", "index0": True},
            {"guid": S1, "membership": "limited"}]},
    ]}


def test_tenant_pkey_at_index_0_rendered_with_indx0() -> None:
    """Finding 11.5: the tenant's members get ``indx0``; storage (limited) members of the
    same key are a separate statement without it (indx0 applies to a whole statement)."""
    text = render_partitions_conf(PartitionMap.from_wire(storage_map()))
    assert f"tenant_a=0x0101,ipoib,indx0 : {A1}=full, {A2}=full ;" in text
    assert f"tenant_a=0x0101 : {S1}=limited ;" in text
    assert f"tenant_b=0x0102,ipoib,indx0 : {B1}=full ;" in text
    assert text.count("indx0") == 2


def test_storage_port_is_limited_member_of_every_tenant_partition() -> None:
    """Finding 11.4: the rendered file makes S1 a limited member of each tenant's key."""
    conf = parse_block(render_partitions_conf(PartitionMap.from_wire(storage_map())))
    assert conf == {0x0101: {A1: "full", A2: "full", S1: "limited"},
                    0x0102: {B1: "full", S1: "limited"}}


def test_opensm_keeps_operator_lines_outside_its_block(tmp_path: Path) -> None:
    conf = tmp_path / "partitions.conf"
    operator = ("# site partitions\nDefault=0x7fff,ipoib : ALL=full ;\n"
                "mgmt=0x0050 : 0x00000000000000aa=full ;\n")
    conf.write_text(operator)
    mgr = OpenSmManager(conf, pid=os.getpid(), run=lambda argv: "")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "kill", lambda pid, sig: None)
        mgr.apply(PartitionMap.from_wire(storage_map(1)))
        mgr.apply(PartitionMap.from_wire(storage_map(2)))
    text = conf.read_text()
    assert text.startswith(operator)
    assert text.count(BEGIN) == 1
    assert "ALL=limited" not in text  # the operator's Default line is theirs: none of ours
    assert 0x0050 not in mgr.managed()  # outside the block: never ours
    assert mgr.managed()[0x0101] == {A1: "full", A2: "full", S1: "limited"}


def test_parse_smpquery_table_keeps_positions() -> None:
    out = "   0: 0x7fff 0x0101 0x0000 0x0102 0x0000 0x0000 0x0000 0x0000\n"
    assert parse_smpquery_table(out)[:4] == [0x7FFF, 0x0101, 0x0000, 0x0102]
    assert parse_smpquery_pkeys(out) == [0x7FFF, 0x0101, 0x0102]


def test_restarted_opensm_driver_removes_stale_members(tmp_path: Path) -> None:
    """Finding 10.9 (OpenSM): a new driver process learns from the file's block which
    members it wrote, removes the stale ones and verifies their removal (the old applier
    only verified GUIDs it had seen in this process, so a stale key went unreported)."""
    conf = tmp_path / "partitions.conf"
    tables = {A1: "   0: 0x8101 0x7fff\n", A2: "   0: 0x8101 0x7fff\n",
              B1: "   0: 0x8102 0x7fff\n", S1: "   0: 0x7fff 0x0101 0x0102\n"}
    hups: list[int] = []

    def manager() -> OpenSmManager:
        return OpenSmManager(conf, pid=4242, run=lambda argv: tables[argv[-1]])

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "kill", lambda pid, sig: hups.append(pid))
        FabricApplier(manager(), verify_timeout_s=0).apply(storage_map(1))
        # the agent restarts; tenant A's lease ended meanwhile
        restarted = FabricApplier(manager(), verify_timeout_s=0)
        only_b = {"generation": 2, "partitions": [storage_map()["partitions"][1]]}  # type: ignore[index]
        restarted.apply(only_b)
    assert parse_block(conf.read_text()) == {0x0102: {B1: "full", S1: "limited"}}
    assert len(hups) == 2
    # OpenSM has not reprogrammed the ports yet: the stale members are reported as drift
    assert {(d["guid"], d["pkey"]) for d in restarted.observed()["drift"]} == {
        (A1, "0x0101"), (A2, "0x0101"), (S1, "0x0101")}
    tables.update({A1: "   0: 0x7fff\n", A2: "   0: 0x7fff\n", S1: "   0: 0x7fff 0x0000 0x0102\n"})
    assert restarted.verify() == []


def _ufm(ufm: FakeUfm) -> UfmManager:
    return UfmManager("https://ufm.test", "admin", "secret",
                      transport=httpx.MockTransport(ufm.handle))


def test_restarted_ufm_driver_removes_stale_members() -> None:
    """Finding 10.9 (UFM): the old driver kept "the keys we manage" in memory, so a driver
    restarted after tenant A's lease ended never removed A's GUIDs from 0x0101."""
    ufm = FakeUfm()
    FabricApplier(_ufm(ufm), verify_timeout_s=0).apply(storage_map(1))
    assert parse_pkeys(ufm.pkeys)[0x0101] == {A1: "full", A2: "full", S1: "limited"}
    restarted = FabricApplier(_ufm(ufm), verify_timeout_s=0)  # a new process: no memory
    restarted.apply({"generation": 2, "partitions": [storage_map()["partitions"][1]]})  # type: ignore[index]
    assert parse_pkeys(ufm.pkeys)[0x0101] == {}
    assert parse_pkeys(ufm.pkeys)[0x0102] == {B1: "full", S1: "limited"}
    assert restarted.observed()["drift"] == []


def test_ufm_driver_leaves_keys_that_are_not_its_own() -> None:
    ufm = FakeUfm()
    ufm.pkeys["0x0050"] = {"guids": [{"guid": "00000000000000aa", "membership": "full"}]}
    ufm.pkeys["0x0300"] = {"partition": "site_storage", "guids": [
        {"guid": "00000000001000f1", "membership": "full"}]}
    mgr = _ufm(ufm)
    assert set(mgr.managed()) == set()  # out of range / named by an operator
    FabricApplier(mgr, verify_timeout_s=0).apply({"generation": 1, "partitions": []})
    assert parse_pkeys(ufm.pkeys)[0x0050] == {"0x00000000000000aa": "full"}
    assert parse_pkeys(ufm.pkeys)[0x0300] == {S1: "full"}
    assert not [c for c in ufm.calls if c[0].endswith("remove_guids_from_pkey")]


def test_ufm_tenant_pkey_at_index_0() -> None:
    """Finding 11.5 (UFM): tenant members are posted with ``index0: true``, storage
    (limited) members of the same key with ``index0: false``."""
    ufm = FakeUfm()
    FabricApplier(_ufm(ufm), verify_timeout_s=0).apply(storage_map(1))
    posted = [b for path, b in ufm.calls if path == "/ufmRest/resources/pkeys"]
    assert {"pkey": "0x0101", "guids": ["0000000000100009", "000000000010000b"],
            "membership": "full", "index0": True, "ip_over_ib": True} in posted
    assert {"pkey": "0x0101", "guids": ["00000000001000f1"], "membership": "limited",
            "index0": False, "ip_over_ib": True} in posted
    calls = len(ufm.calls)
    FabricApplier(_ufm(ufm), verify_timeout_s=0).apply(storage_map(2))  # nothing to change
    assert [p for p, _ in ufm.calls[calls:] if p != "/ufmRest/resources/pkeys/"] == []


def test_opensm_takes_over_a_file_an_older_agent_wrote_whole(tmp_path: Path) -> None:
    conf = tmp_path / "partitions.conf"
    conf.write_text("# Managed by the gpupool fabric agent: every change here is overwritten.\n"
                    "# generation 3\nDefault=0x7fff,ipoib : ALL=limited, SELF=full ;\n"
                    f"tenant_a=0x0101,ipoib : {A1}=full ;\n")
    mgr = OpenSmManager(conf, pid=4242, run=lambda argv: "")
    assert mgr.managed() == {0x0101: {A1: "full"}}  # the old members are known as ours
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "kill", lambda pid, sig: None)
        mgr.apply(PartitionMap.from_wire({"generation": 4, "partitions": []}))
    text = conf.read_text()
    assert text.startswith(BEGIN) and "Managed by" not in text and "tenant_a" not in text
    assert text.count("Default=") == 1


def test_operator_keys_on_tenant_ports_are_not_drift(tmp_path: Path) -> None:
    """With operator lines kept outside the block, a tenant port may also hold an operator
    key (a management partition): that is not the agent's drift to report."""
    conf = tmp_path / "partitions.conf"
    conf.write_text("mgmt=0x0050 : ALL_CAS=full ;\n")
    tables = {A1: "   0: 0x8101 0x7fff 0x8050\n", A2: "   0: 0x8101 0x7fff 0x8050\n",
              S1: "   0: 0x7fff 0x0101 0x8050\n"}
    applier = FabricApplier(OpenSmManager(conf, pid=4242, run=lambda argv: tables[argv[-1]]),
                            verify_timeout_s=0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "kill", lambda pid, sig: None)
        applier.apply({"generation": 1, "partitions": [storage_map()["partitions"][0]]})  # type: ignore[index]
    assert applier.observed()["drift"] == []


def test_key_not_at_index_0_is_reported_as_drift(tmp_path: Path) -> None:
    """Finding 11.5 made visible: an SM that ignores ``indx0`` (older OpenSM) leaves the
    limited default key at index 0 (``0x7fff 0x8101``, as in the finding); the fabric agent
    reports it instead of calling the partition in sync."""
    tables = {A1: "   0: 0x7fff 0x8101\n", A2: "   0: 0x8101 0x7fff\n", S1: "   0: 0x7fff 0x0101\n"}
    applier = FabricApplier(OpenSmManager(tmp_path / "p.conf", pid=4242,
                                          run=lambda argv: tables[argv[-1]]), verify_timeout_s=0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "kill", lambda pid, sig: None)
        applier.apply({"generation": 1, "partitions": [storage_map()["partitions"][0]]})  # type: ignore[index]
    assert applier.observed()["drift"] == [
        {"pkey": "0x0101", "guid": A1, "expected": "index0", "actual": "index0 0x7fff"}]
    tables[A1] = "   0: 0x8101 0x7fff\n"
    assert applier.verify() == []


class SlowSm(FakeFabric):
    """An SM that programs the ports only after ``reads_until_set`` read-backs."""

    def __init__(self, reads_until_set: int) -> None:
        super().__init__()
        self.reads_until_set = reads_until_set

    def read_back(self, guids: set[str]) -> dict[int, dict[str, str]]:
        if self.reads_until_set > 0:
            self.reads_until_set -= 1
            return {}
        return super().read_back(guids)


def test_fabric_verify_rereads_at_short_growing_intervals() -> None:
    """Finding (issue 12): the verify loop slept 1 s between read-backs, so a partition the
    SM set in 0.1 s was reported applied after 1 s (and a release waited as long)."""
    slept: list[float] = []
    sm = SlowSm(reads_until_set=3)
    applier = FabricApplier(sm, verify_timeout_s=30, sleep=slept.append)
    applier.apply({"generation": 2, "partitions": [
        {"name": "tenant_a", "pkey": "0x0101", "members": [{"guid": A1, "membership": "full"}]}]})
    assert applier.observed()["generation_applied"] == 2
    assert applier.observed()["drift"] == []
    assert slept == [0.05, 0.1, 0.2]  # the old loop: [1.0, 1.0, 1.0]
    assert sum(slept) < 0.5


def test_fabric_verify_steps_are_capped() -> None:
    slept: list[float] = []
    applier = FabricApplier(SlowSm(reads_until_set=7), verify_timeout_s=30,
                            sleep=slept.append, verify_step_s=0.1, verify_max_step_s=0.3)
    applier.apply({"generation": 1, "partitions": [
        {"name": "tenant_a", "pkey": "0x0101", "members": [{"guid": A1, "membership": "full"}]}]})
    assert slept == pytest.approx([0.1, 0.2, 0.3, 0.3, 0.3, 0.3, 0.3])
    assert applier.observed()["generation_applied"] == 1
