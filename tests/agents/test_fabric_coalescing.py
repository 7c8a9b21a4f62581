"""Issue 12, release → ended: the fabric agent applies the newest partition map, not each
one in turn, never lets a verification hold up a newer map, reports the moment a map is
done, and reads OpenSM's ports in parallel (ADR 0135).

Real threads and real time (bounded waits); the SM is a fake whose timing the test sets.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agents.client.backoff import Backoff
from agents.client.fakeportal import FakePortal
from agents.client.portal import PortalClient
from agents.fabric.applier import FabricApplier
from agents.fabric.base import FakeFabric, PartitionMap
from agents.fabric.opensm import OpenSmManager
from agents.host import HostCollector, write_fake_proc
from agents.node.agent import AgentSettings, NodeAgent
from agents.sysfs.faketree import FakeSysfsWriter
from agents.sysfs.infiniband import InfinibandCollector
from agents.telemetry import Sampler

A1, A2 = "0x0000000000000a01", "0x0000000000000a02"


def _map(generation: int, *guids: str) -> dict[str, Any]:
    members = [{"guid": g, "membership": "full"} for g in guids]
    return {"generation": generation, "partitions": [
        {"name": "tenant_a", "pkey": "0x0101", "members": members}] if members else []}


def _wait(predicate: Callable[[], bool], timeout_s: float) -> float | None:
    """Monotonic time at which ``predicate()`` first held, or None after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic()
        time.sleep(0.002)
    return None


class ScriptedSm(FakeFabric):
    """A fake SM: ``apply`` can be held (a slow UFM call), maps whose generation is in
    ``never`` are never programmed, the others ``program_after_s`` after their apply;
    ``read_s`` is what one read-back round takes."""

    def __init__(self, program_after_s: float = 0.0, read_s: float = 0.0,
                 never: frozenset[int] = frozenset()) -> None:
        super().__init__()
        self.program_after_s, self.read_s, self.never = program_after_s, read_s, never
        self.hold: threading.Event | None = None
        self.entered = threading.Event()
        self.apply_started: dict[int, float] = {}
        self.pending: dict[int, dict[str, str]] | None = None
        self.program_at = 0.0
        self.reads = 0

    def apply(self, pmap: PartitionMap) -> None:
        self.apply_started[pmap.generation] = time.monotonic()
        self.entered.set()
        if self.hold is not None:
            assert self.hold.wait(5), "the test never released the held apply"
            self.hold = None
        self.applied.append(pmap)
        if pmap.generation not in self.never:
            self.pending = {k: dict(v) for k, v in pmap.expected().items()}
            self.program_at = time.monotonic() + self.program_after_s

    def read_back(self, guids: set[str]) -> dict[int, dict[str, str]]:
        self.reads += 1
        time.sleep(self.read_s)
        if self.pending is not None and time.monotonic() >= self.program_at:
            self.state, self.pending = self.pending, None
        return super().read_back(guids)


@contextmanager
def _worker(applier: FabricApplier) -> Iterator[threading.Event]:
    stop = threading.Event()
    thread = threading.Thread(target=applier.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield stop
    finally:
        stop.set()
        thread.join(5)
        assert not thread.is_alive(), "the fabric worker did not stop"


def test_three_maps_arriving_during_one_apply_cost_one_apply_of_the_newest() -> None:
    """The old agent applied (and verified) 2, 3 and 4 one after the other once 1 was done;
    every map is the whole desired state, so only the newest needs applying."""
    sm = ScriptedSm()
    sm.hold = threading.Event()
    applier = FabricApplier(sm, verify_timeout_s=5)
    with _worker(applier):
        assert applier.submit(_map(1, A1))
        assert sm.entered.wait(2)
        for generation in (2, 3, 4):  # arrive while map 1 is being applied
            assert applier.submit(_map(generation, A1, A2) if generation != 3 else _map(3))
        assert not applier.submit(_map(3))  # older than the newest held: refused
        sm.hold.set()
        assert _wait(lambda: applier.generation_applied == 4, 3)
    assert [m.generation for m in sm.applied] == [1, 4]
    assert applier.applies == 2
    assert applier.observed()["drift"] == []
    assert applier.observed()["generation_seen"] == 4


def test_newer_map_does_not_wait_for_an_unfinished_verification() -> None:
    """Map 1 is never programmed (verification would run to its 30 s timeout): map 2 is
    applied as soon as it arrives, and map 1 is never reported applied."""
    sm = ScriptedSm(never=frozenset({1}))
    applier = FabricApplier(sm, verify_timeout_s=30)
    with _worker(applier):
        applier.submit(_map(1, A1))
        assert _wait(lambda: sm.reads >= 2, 2), "map 1 is not being verified"
        sent = time.monotonic()
        applier.submit(_map(2, A2))
        done = _wait(lambda: applier.generation_applied == 2, 2)
        assert 1 not in {applier.generation_applied}
    assert done is not None, "map 2 waited for map 1's verification (30 s timeout)"
    assert sm.apply_started[2] - sent < 0.3, sm.apply_started[2] - sent
    assert [m.generation for m in sm.applied] == [1, 2]
    assert applier.observed()["drift"] == []


def test_a_read_back_round_in_flight_does_not_hold_up_a_newer_map() -> None:
    """A read-back round of the old map takes 1.5 s (a slow fabric): the newer map's
    apply starts at once; the old round's answer is dropped."""
    sm = ScriptedSm(read_s=1.5, never=frozenset({1}))
    applier = FabricApplier(sm, verify_timeout_s=30)
    with _worker(applier):
        applier.submit(_map(1, A1))
        assert _wait(lambda: sm.reads >= 1, 2)
        sent = time.monotonic()
        applier.submit(_map(2, A2))
        assert _wait(lambda: 2 in sm.apply_started, 1.0), "the apply waited for the round"
        assert sm.apply_started[2] - sent < 0.3
        assert _wait(lambda: applier.generation_applied == 2, 5)
    assert applier.observed()["drift"] == []


def test_observed_answers_while_a_verification_runs() -> None:
    """The old applier held its lock over apply and verification: the agent's report
    (``observed``) waited for the whole verification."""
    sm = ScriptedSm(read_s=0.5, program_after_s=2.0)
    applier = FabricApplier(sm, verify_timeout_s=10)
    with _worker(applier):
        applier.submit(_map(1, A1))
        assert _wait(lambda: sm.reads >= 1, 2)
        began = time.monotonic()
        observed = applier.observed()
        took = time.monotonic() - began
        assert took < 0.05, f"observed() waited {took:.3f} s for the fabric"
        assert observed["generation_seen"] == 1
        assert observed["generation_applied"] == 0
        assert _wait(lambda: applier.generation_applied == 1, 5)


def test_on_change_is_called_the_moment_a_map_is_verified() -> None:
    sm = ScriptedSm(program_after_s=0.3)
    called: list[float] = []
    applier = FabricApplier(sm, verify_timeout_s=10, on_change=lambda: called.append(
        time.monotonic()))  # fmt: skip
    with _worker(applier):
        applier.submit(_map(1, A1))
        assert _wait(lambda: bool(called), 2)
    assert called[0] - sm.program_at < 0.25  # the verify step (≤ 0.2 s here) + slack
    assert applier.generation_applied == 1


def _fabric_agent(tmp: Path, portal: FakePortal, sm: FakeFabric) -> NodeAgent:
    FakeSysfsWriter(tmp / "sys")
    write_fake_proc(tmp / "proc", "sm-host", cpus=2, mem_gib=1)
    sampler = Sampler(HostCollector(tmp / "proc"), InfinibandCollector(tmp / "sys"), None,
                      nvml_error="fabric role")  # fmt: skip
    client = PortalClient("http://portal.test", transport=portal.transport())
    settings = AgentSettings(state_dir=tmp / "state", role="fabric", fsync=False,
                             bootstrap_token=portal.issue_bootstrap_token(role="fabric"),
                             long_poll_s=2)  # fmt: skip
    return NodeAgent(settings, client, sampler, FabricApplier(sm, verify_timeout_s=10),
                     backoff=Backoff(base_s=1, cap_s=60, rng=random.Random(1)))


def test_fabric_agent_reports_the_map_applied_when_the_sm_has_set_it(tmp_path: Path) -> None:
    """Through the agent's own loop and long-poll: a map is reported applied within one
    verify step of the SM programming it (regular reports are 10 s apart), and a second
    map sent while the first is still being verified (the SM never programs map 1) is
    applied at once: the old agent verified map 1 to its 10 s timeout first."""
    portal = FakePortal()
    sm = ScriptedSm(program_after_s=0.4, never=frozenset({1}))
    agent = _fabric_agent(tmp_path, portal, sm)
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert _wait(lambda: any(n.reports for n in portal.nodes.values()), 5)
        node = next(iter(portal.nodes.values()))

        def reported(generation: int) -> bool:
            return any(r["observed"]["generation_applied"] >= generation for r in node.reports)

        gen1 = portal.set_desired(node.node_id, partitions=_map(0, A1)["partitions"])
        assert gen1 == 1
        assert _wait(lambda: 1 in {m.generation for m in sm.applied}, 3)
        time.sleep(0.2)  # map 1 is being verified
        gen2 = portal.set_desired(node.node_id, partitions=_map(0, A1, A2)["partitions"])
        seen = _wait(lambda: reported(gen2), 5)
    finally:
        stop.set()
        thread.join(5)
    assert seen is not None, "no report of the map applied (regular reports are 10 s apart)"
    assert seen - sm.program_at < 0.4, f"reported {seen - sm.program_at:.2f} s after the SM"
    assert sm.apply_started[gen2] - sm.apply_started[gen1] < 1.0  # not after map 1's 10 s
    assert not any(r["observed"]["generation_applied"] == gen1 for r in node.reports)


def test_opensm_read_back_reads_ports_in_parallel(tmp_path: Path) -> None:
    """Eight ports, 0.2 s per ``smpquery``: one after the other a round took 1.6 s."""
    guids = [f"0x{0xa00 + i:016x}" for i in range(8)]
    tables = {g: f"   0: 0xffff {'0x8101' if i % 2 else '0x0000'}\n"
              for i, g in enumerate(guids)}  # fmt: skip

    def smpquery(argv: list[str]) -> str:
        time.sleep(0.2)
        return tables[argv[-1]]

    mgr = OpenSmManager(tmp_path / "p.conf", pid=4242, run=smpquery)
    began = time.monotonic()
    got = mgr.read_back(set(guids))
    took = time.monotonic() - began
    assert got == {0x0101: {g: "full" for i, g in enumerate(guids) if i % 2}}
    assert took < 0.8, f"read-back of 8 ports took {took:.2f} s"
    assert mgr.read_index0({guids[1]}) == {guids[1]: 0x7FFF}  # from the same round
