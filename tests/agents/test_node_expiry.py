"""Grants expire on the agent: at ``not_after`` the agent removes the grant itself, with
the portal unreachable, and never re-creates it from a stale desired state."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from agents import protocol
from agents.client.fakeportal import FakePortal
from agents.node.access import FakeAccess
from tests.agents.helpers import FakeClock, make_agent

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA alice@example.org"


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat()


def _grant(account: str, not_after: float | None) -> dict[str, object]:
    g: dict[str, object] = {"lease_id": "ls_" + account, "account": account,
                            "gpu_indices": [0], "ssh_authorized_keys": [KEY]}
    if not_after is not None:
        g["not_after"] = _iso(not_after)
    return g


def test_agent_removes_grant_at_not_after_with_portal_down(tmp_path: Path) -> None:
    portal, clock = FakePortal(), FakeClock()
    agent, _, _ = make_agent(tmp_path, portal, clock, token=portal.issue_bootstrap_token())
    agent.tick()  # enrol
    node = portal.node_by_hostname("gpu-node-01")
    ends = clock.now + 60
    portal.set_desired(node.node_id, partitions=[],
                       access_grants=[_grant("lease-a", ends), _grant("lease-b", None)])
    agent.tick()  # report -> ack names a newer generation -> fetch and apply
    access = agent.applier.access
    assert isinstance(access, FakeAccess)
    assert set(access.present()) == {"lease-a", "lease-b"}
    portal.up = False  # the portal is gone from here on
    delay = agent.tick()
    assert delay <= 60  # the loop wakes for the expiry, not only for its regular work
    clock.advance(59.5)
    agent.tick()
    assert set(access.present()) == {"lease-a", "lease-b"}
    clock.advance(0.5)
    agent.tick()
    assert set(access.present()) == {"lease-b"}  # removed at not_after, portal down
    assert access.revoked == ["lease-a"]
    assert agent.applier.expire_grants() is False  # once
    # a stale desired state (the portal catching up late) does not bring it back
    agent.applier.apply({**node.desired, "generation": node.desired["generation"]})
    assert set(access.present()) == {"lease-b"}
    assert agent.applier.next_expiry() is None


def test_not_after_is_validated_identically_on_both_sides() -> None:
    from portal.fleet import protocol as portal_protocol

    base = {"protocol": 1, "node_id": "nd_1", "generation": 1, "issued_at": _iso(0),
            "partitions": []}
    for value, ok in (("2026-12-01T10:00:00+00:00", True), ("2026-12-01T10:00:00Z", True),
                      ("2026-12-01T11:00:00+01:00", False), ("2026-12-01T10:00:00", False),
                      ("tomorrow", False), (17, False)):
        grant = {**_grant("lease-a", None), "not_after": value}
        body = {**base, "access_grants": [grant]}
        agent_side = protocol.validate_desired_state(body, "node")
        assert agent_side == portal_protocol.validate_desired_state(body, "node")
        assert (agent_side == []) is ok, (value, agent_side)
        if not ok:
            assert agent_side[0]["field"] == "access_grants[0].not_after"


def test_agent_restarted_during_outage_still_removes_grant_at_not_after(tmp_path: Path) -> None:
    portal, clock = FakePortal(), FakeClock()
    agent, _, _ = make_agent(tmp_path, portal, clock, token=portal.issue_bootstrap_token())
    agent.tick()
    node = portal.node_by_hostname("gpu-node-01")
    portal.set_desired(node.node_id, partitions=[],
                       access_grants=[_grant("lease-a", clock.now + 60)])
    agent.tick()
    access = agent.applier.access
    assert set(access.present()) == {"lease-a"}
    portal.up = False
    # the agent restarts (same state dir, same host: the grant is still in place)
    again, _, _ = make_agent(tmp_path, portal, clock)
    again.applier.access = access
    assert again.restore_desired()
    assert again.applier.generation_applied == node.generation
    again.tick()
    assert set(access.present()) == {"lease-a"}
    clock.advance(61)
    again.tick()
    assert access.present() == {}
