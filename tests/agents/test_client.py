import json
import stat
import threading
import time
from pathlib import Path

import httpx
import pytest

from agents import protocol
from agents.client.backoff import Backoff
from agents.client.fakeportal import FakePortal
from agents.client.portal import PortalClient, PortalError
from agents.client.spool import DiskSpool
from tests.agents.helpers import FakeClock, make_agent


def run_for(agent, clock: FakeClock, seconds: float, step: float = 1.0) -> None:  # type: ignore[no-untyped-def]
    end = clock.now + seconds
    while clock.now < end:
        agent.tick()
        clock.advance(step)


def test_enrolment_one_time_token_and_credential_file(tmp_path: Path) -> None:
    portal, clock = FakePortal(), FakeClock()
    token = portal.issue_bootstrap_token()
    agent, _, _ = make_agent(tmp_path / "a", portal, clock, token=token)
    agent.tick()
    assert agent.enrolled()
    cred = tmp_path / "a/state/credential.json"
    assert stat.S_IMODE(cred.stat().st_mode) == 0o600
    node = portal.node_by_hostname("gpu-node-01")
    assert node.role == "node"
    # the token is one-time
    other, _, _ = make_agent(tmp_path / "b", portal, clock, index=2, token=token)
    other.tick()
    assert not other.enrolled()
    # restart: the credential is reloaded, no second enrolment
    again, _, _ = make_agent(tmp_path / "a", portal, clock, token=None)
    assert again.enrolled()
    assert len(portal.nodes) == 1


def test_reports_carry_telemetry_and_increasing_seq(tmp_path: Path) -> None:
    portal, clock = FakePortal(), FakeClock()
    agent, _, _ = make_agent(tmp_path, portal, clock, token=portal.issue_bootstrap_token())
    run_for(agent, clock, 60)
    node = portal.node_by_hostname("gpu-node-01")
    seqs = [r["seq"] for r in node.reports]
    assert seqs == list(range(1, len(seqs) + 1))
    assert len(seqs) >= 5
    report = node.reports[-1]
    assert protocol.validate_report(report) == []
    t = report["telemetry"][0]
    assert len(t["gpus"]) == 8
    assert t["ib_ports"][0]["port_guid"].startswith("0x")
    assert report["observed"]["generation_applied"] == 0


def test_ten_minute_outage_loses_nothing(tmp_path: Path) -> None:
    portal, clock = FakePortal(), FakeClock()
    agent, _, _ = make_agent(tmp_path, portal, clock, token=portal.issue_bootstrap_token())
    run_for(agent, clock, 120)
    before = len(portal.node_by_hostname("gpu-node-01").reports)
    portal.up = False
    requests_before = portal.request_count
    run_for(agent, clock, 600)
    assert len(agent.spool) >= 59  # one report per 10 s kept on disk
    assert len(list((tmp_path / "state/spool").glob("*.json"))) >= 60
    portal.up = True
    run_for(agent, clock, 180)
    node = portal.node_by_hostname("gpu-node-01")
    seqs = [r["seq"] for r in node.reports]
    assert seqs == list(range(1, agent.spool.next_seq))  # all, once, in order
    assert len(seqs) > before + 60
    assert agent.spool.dropped == 0
    assert len(agent.spool) == 0
    assert portal.request_count > requests_before
    # the sample timestamps cover the outage without a hole bigger than the interval
    ts = [t["ts"] for r in node.reports for t in r["telemetry"]]
    assert max(b - a for a, b in zip(ts, ts[1:], strict=False)) <= 10.0 + 1e-6


def test_backoff_has_jitter_and_cap() -> None:
    import random

    b = Backoff(base_s=1, cap_s=60, rng=random.Random(1))
    delays = [b.next_delay() for _ in range(12)]
    assert all(0 < d <= 60 for d in delays)
    assert delays[-1] >= 30  # capped range [cap/2, cap]
    assert len({round(d, 6) for d in delays[-5:]}) == 5  # jittered, not identical
    b.reset()
    assert b.next_delay() <= 1


def test_lost_ack_resend_is_not_double_counted(tmp_path: Path) -> None:
    portal, clock = FakePortal(), FakeClock()
    drop_next_ack = {"on": False}

    def handler(request: httpx.Request) -> httpx.Response:
        response = portal.handle(request)
        if drop_next_ack["on"] and request.url.path.endswith("/reports"):
            drop_next_ack["on"] = False
            raise httpx.ReadTimeout("ack lost", request=request)
        return response

    agent, _, _ = make_agent(tmp_path, portal, clock, token=portal.issue_bootstrap_token(),
                             transport=httpx.MockTransport(handler))
    run_for(agent, clock, 30)
    drop_next_ack["on"] = True
    run_for(agent, clock, 120)
    node = portal.node_by_hostname("gpu-node-01")
    seqs = [r["seq"] for r in node.reports]
    assert seqs == sorted(set(seqs))
    assert seqs == list(range(1, agent.spool.next_seq))


def test_duplicate_ack_and_cross_node_forbidden(tmp_path: Path) -> None:
    portal, clock = FakePortal(), FakeClock()
    a, _, _ = make_agent(tmp_path / "a", portal, clock, token=portal.issue_bootstrap_token())
    b, _, _ = make_agent(tmp_path / "b", portal, clock, index=2,
                         token=portal.issue_bootstrap_token())
    for _ in range(2):
        a.tick()
        b.tick()
    node_a = portal.node_by_hostname("gpu-node-01")
    report = node_a.reports[0]
    ack1 = a.client.send_report(report)
    assert ack1["status"] == "duplicate"
    assert len(node_a.reports) == 1
    # node b's credential writing node a's data
    assert a.client.credential is not None
    assert b.client.credential is not None
    with pytest.raises(PortalError) as err:
        PortalClient("http://portal.test", credential=type(a.client.credential)(
            a.client.credential.node_id, b.client.credential.credential),
            transport=portal.transport()).send_report(report)
    assert err.value.status == 403
    assert err.value.code == "forbidden"
    # also a body claiming another node id under the right URL
    with pytest.raises(PortalError) as err:
        b.client.send_report({**report, "seq": 999})
    assert err.value.status == 403
    # no credential at all
    with pytest.raises(PortalError) as err:
        PortalClient("http://portal.test", credential=type(a.client.credential)(
            a.client.credential.node_id, "gpn_wrong"), transport=portal.transport()
        ).send_report(report)
    assert err.value.status == 401


def test_malformed_report_is_400_with_details_and_dropped(tmp_path: Path) -> None:
    portal, clock = FakePortal(), FakeClock()
    agent, _, _ = make_agent(tmp_path, portal, clock, token=portal.issue_bootstrap_token())
    agent.tick()
    bad = {**(agent.spool.peek() or {}), "seq": 0, "telemetry": [{"ts": "yesterday"}]}
    with pytest.raises(PortalError) as err:
        agent.client.send_report(bad)
    assert err.value.status == 400
    assert err.value.code == "invalid_report"
    fields = {p["field"] for p in portal.rejected[-1]["problems"]}
    assert {"seq", "telemetry[0].ts", "telemetry[0].host"} <= fields
    # a poison report in the spool is dropped (counted), the queue moves on
    agent.spool.push({**bad, "seq": agent.spool.allocate_seq()})
    run_for(agent, clock, 30)
    assert agent.rejected == 1
    assert len(agent.spool) == 0


def test_spool_bounded_oldest_dropped_with_counter(tmp_path: Path) -> None:
    spool = DiskSpool(tmp_path, max_reports=3, fsync=False)
    for _ in range(5):
        spool.push({"seq": spool.allocate_seq()})
    assert spool.dropped == 2
    assert (spool.peek() or {})["seq"] == 3
    reopened = DiskSpool(tmp_path, max_reports=3)
    assert reopened.dropped == 2
    assert reopened.next_seq == 6
    assert len(reopened) == 3
    (tmp_path / "000000000003.json").write_text("{torn")
    assert (reopened.peek() or {})["seq"] == 4
    assert reopened.dropped == 3


def test_outage_beyond_spool_reports_dropped_count(tmp_path: Path) -> None:
    portal, clock = FakePortal(), FakeClock()
    agent, _, _ = make_agent(tmp_path, portal, clock, token=portal.issue_bootstrap_token(),
                             max_spooled=10)
    run_for(agent, clock, 20)
    portal.up = False
    run_for(agent, clock, 300)
    portal.up = True
    run_for(agent, clock, 120)
    node = portal.node_by_hostname("gpu-node-01")
    assert agent.spool.dropped > 0
    assert node.reports[-1]["dropped_reports"] == agent.spool.dropped
    seqs = [r["seq"] for r in node.reports]
    assert seqs == sorted(seqs)


def test_desired_state_applied_idempotently_and_generation_reported(tmp_path: Path) -> None:
    portal, clock = FakePortal(), FakeClock()
    agent, api, _ = make_agent(tmp_path, portal, clock, token=portal.issue_bootstrap_token())
    agent.tick()
    node = portal.node_by_hostname("gpu-node-01")
    guid = agent.sampler.ib.collect()[0].ports[0].port_guid
    grant = {"lease_id": "ls_1", "account": "lease-ls1", "gpu_indices": [0, 1],
             "gpu_uuids": [api.gpus[0].uuid, api.gpus[1].uuid],
             "ssh_authorized_keys": ["ssh-ed25519 AAAAC3Nza alice@example"]}
    gen = portal.set_desired(
        node.node_id,
        partitions=[{"name": "tenant_a", "pkey": "0x0101", "membership": "full",
                     "ipoib": True, "port_guids": [guid]}],
        access_grants=[grant],
    )
    run_for(agent, clock, 30)
    observed = node.reports[-1]["observed"]
    assert observed["generation_applied"] == gen
    assert observed["access_grants"] == [
        {"account": "lease-ls1", "lease_id": "ls_1", "state": "present"}]
    assert observed["ipoib_children"] == [{"parent": "ib0", "name": "ib0.8101", "pkey": "0x8101"}]
    # the SM has not added the key yet: the node reports the mismatch
    assert observed["partitions"][0]["missing"] == ["0x8101"]
    assert not observed["partitions"][0]["in_sync"]
    calls = list(agent.applier.ipoib.calls)
    # applying the same generation again changes nothing
    agent.applier.apply(node.desired)
    assert agent.applier.ipoib.calls == calls
    # lease ends: new generation without grant/partition
    gen2 = portal.set_desired(node.node_id, partitions=[], access_grants=[])
    run_for(agent, clock, 30)
    observed = node.reports[-1]["observed"]
    assert observed["generation_applied"] == gen2
    assert observed["access_grants"] == []
    assert observed["ipoib_children"] == []
    assert agent.applier.access.revoked == ["lease-ls1"]


def test_long_poll_wakes_agent(tmp_path: Path) -> None:
    portal, clock = FakePortal(), FakeClock()
    agent, _, _ = make_agent(tmp_path, portal, clock, token=portal.issue_bootstrap_token())
    agent.tick()
    node = portal.node_by_hostname("gpu-node-01")
    result: dict[str, object] = {}

    def poll() -> None:
        started = time.monotonic()
        result["applied"] = agent.poll_desired(wait_s=5)
        result["took"] = time.monotonic() - started

    t = threading.Thread(target=poll)
    t.start()
    time.sleep(0.05)
    portal.set_desired(node.node_id, partitions=[], access_grants=[])
    t.join(5)
    assert result["applied"] is True
    assert float(result["took"]) < 4.5  # type: ignore[arg-type]  (woken, not the 5 s timeout)
    assert agent.wake.is_set()  # the next tick reports immediately
    assert agent.poll_desired(wait_s=0) is False  # nothing newer: 204


def test_credential_rotation_with_overlap(tmp_path: Path) -> None:
    portal, clock = FakePortal(clock=FakeClock()), FakeClock()
    agent, _, _ = make_agent(tmp_path, portal, clock, token=portal.issue_bootstrap_token())
    agent.tick()
    agent.tick()
    assert agent.client.credential is not None
    old = agent.client.credential
    new = agent.client.rotate_credential()
    assert new.credential != old.credential
    report = portal.nodes[old.node_id].reports[0]
    old_client = PortalClient("http://portal.test", credential=old, transport=portal.transport())
    node = portal.nodes[old.node_id]
    assert len(node.credential_hashes) == 2
    portal.clock.advance(3601)  # type: ignore[attr-defined]
    with pytest.raises(PortalError) as err:
        old_client.send_report(report)
    assert err.value.status == 401
    agent.client.send_report({**report, "seq": 77})


def test_unreachable_portal_during_enrolment_backs_off(tmp_path: Path) -> None:
    portal, clock = FakePortal(), FakeClock()
    portal.up = False
    agent, _, _ = make_agent(tmp_path, portal, clock, token=portal.issue_bootstrap_token())
    run_for(agent, clock, 30)
    assert not agent.enrolled()
    portal.up = True
    run_for(agent, clock, 120)
    assert agent.enrolled()


def test_error_body_shape() -> None:
    body = protocol.error_body("invalid_report", "1 problem(s)", [{"field": "seq", "problem": "x"}])
    assert json.loads(json.dumps(body)) == {
        "error": {"code": "invalid_report", "message": "1 problem(s)",
                  "details": [{"field": "seq", "problem": "x"}]}}


def test_failed_apply_is_retried_on_next_ack(tmp_path: Path) -> None:
    portal, clock = FakePortal(), FakeClock()
    agent, _, _ = make_agent(tmp_path, portal, clock, token=portal.issue_bootstrap_token())
    agent.tick()
    node = portal.node_by_hostname("gpu-node-01")
    access = agent.applier.access
    real_apply = access.apply
    fail = {"n": 2}

    def flaky(grant):  # type: ignore[no-untyped-def]
        if fail["n"] > 0:
            fail["n"] -= 1
            raise OSError("disk full")
        real_apply(grant)

    access.apply = flaky
    gen = portal.set_desired(node.node_id, partitions=[], access_grants=[
        {"lease_id": "ls_9", "account": "lease-9", "gpu_indices": [0], "ssh_authorized_keys": []}])
    run_for(agent, clock, 60)
    observed = node.reports[-1]["observed"]
    assert observed["generation_applied"] == gen
    assert observed["apply_errors"] == []
    assert any(r["observed"]["apply_errors"] for r in node.reports)


def test_spool_bounded_by_bytes(tmp_path: Path) -> None:
    spool = DiskSpool(tmp_path, max_reports=100, fsync=False, max_bytes=300)
    for _ in range(10):
        spool.push({"seq": spool.allocate_seq(), "pad": "x" * 80})
    assert spool.bytes <= 300
    assert len(spool) == 3
    assert spool.dropped == 7
    while (r := spool.peek()) is not None:
        spool.pop(r["seq"])
    assert spool.bytes == 0
    assert DiskSpool(tmp_path).bytes == 0


def test_desired_state_of_another_node_is_forbidden(tmp_path: Path) -> None:
    portal, clock = FakePortal(), FakeClock()
    a, _, _ = make_agent(tmp_path / "a", portal, clock, token=portal.issue_bootstrap_token())
    b, _, _ = make_agent(tmp_path / "b", portal, clock, index=2,
                         token=portal.issue_bootstrap_token())
    a.tick()
    b.tick()
    assert a.client.credential is not None
    assert b.client.credential is not None
    portal.set_desired(a.client.credential.node_id, partitions=[], access_grants=[])
    b.client.credential = type(b.client.credential)(a.client.credential.node_id,
                                                    b.client.credential.credential)
    with pytest.raises(PortalError) as err:
        b.client.desired_state(0, 0)
    assert err.value.status == 403
