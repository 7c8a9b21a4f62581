"""The portal's validator agrees with the agents' one, problem for problem."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agents import protocol as agent_protocol
from portal.fleet import protocol
from tests.portal.fleet.helpers import gpu, port, report, sample


def mutations() -> list[Any]:
    base = report("nd_0123456789abcdef", 3, telemetry=[sample(
        gpus=[gpu(0), gpu(1)], ports=[port()],
        xids=[{"gpu_uuid": "GPU-x-0", "xid": 79, "ts": 1.0}])])
    out: list[Any] = [base, None, [], "x", {}]
    edits = [
        lambda b: b.pop("seq"), lambda b: b.update(seq=0), lambda b: b.update(seq=True),
        lambda b: b.update(protocol=2), lambda b: b.update(telemetry=[{}] * 121),
        lambda b: b["telemetry"][0]["gpus"][0].update(power_w=-1, index="0"),
        lambda b: b["telemetry"][0]["gpus"][1].pop("healthy"),
        lambda b: b["telemetry"][0]["ib_ports"][0].update(port_guid="0xABC", port=0),
        lambda b: b["telemetry"][0]["ib_ports"][0]["counters"].update(symbol_error=-3),
        lambda b: b["telemetry"][0]["xid_events"][0].pop("xid"),
        lambda b: b["observed"].update(generation_applied=-1, partitions="no"),
        lambda b: b["telemetry"][0].pop("host"),
    ]
    for edit in edits:
        body = copy.deepcopy(base)
        edit(body)
        out.append(body)
    return out


@pytest.mark.parametrize("body", mutations())
def test_report_validation_matches_agents(body: Any) -> None:
    assert protocol.validate_report(body) == agent_protocol.validate_report(body)


@pytest.mark.parametrize("body", [
    {"protocol": 1, "bootstrap_token": "gpb_x", "role": "node", "hostname": "h",
     "agent_version": "1"},
    {"protocol": 1, "role": "king", "inventory": []}, None])
def test_enrol_validation_matches_agents(body: Any) -> None:
    assert protocol.validate_enrol(body) == agent_protocol.validate_enrol(body)


@pytest.mark.parametrize("role", ["node", "fabric"])
def test_desired_validation_matches_agents(role: str) -> None:
    body = {"protocol": 1, "node_id": "nd_x", "generation": 1, "issued_at": "t",
            "partitions": [{"name": "bad name", "pkey": "0x7fff", "membership": "x",
                            "port_guids": ["0x1"], "members": [{"guid": "0x2"}]}],
            "access_grants": [{"account": "Root", "ssh_authorized_keys": ["a\nb"],
                               "gpu_indices": [-1]}]}
    assert protocol.validate_desired_state(body, role) == \
        agent_protocol.validate_desired_state(body, role)
    assert protocol.validate_desired_state(body, role)
