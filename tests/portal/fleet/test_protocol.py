"""The one validator (agents/protocol, imported by the portal through portal.fleet.protocol):
a well-formed report passes and every mutation of it is refused with a field path. (This
file used to compare the portal's copy with the agents' copy; there is one copy now, ADR
0109, and tests/agents/test_protocol_package.py checks that it has one home.)"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agents import protocol as agent_protocol
from portal.fleet import protocol
from tests.portal.fleet.helpers import gpu, port, report, sample


def _base() -> dict[str, Any]:
    return report("nd_0123456789abcdef", 3, telemetry=[sample(
        gpus=[gpu(0), gpu(1)], ports=[port()],
        xids=[{"gpu_uuid": "GPU-x-0", "xid": 79, "ts": 1.0}])])


EDITS = {
    "seq": lambda b: b.pop("seq"), "seq=0": lambda b: b.update(seq=0),
    "seq=True": lambda b: b.update(seq=True), "protocol=2": lambda b: b.update(protocol=2),
    "121 samples": lambda b: b.update(telemetry=[{}] * 121),
    "power_w<0": lambda b: b["telemetry"][0]["gpus"][0].update(power_w=-1, index="0"),
    "no healthy": lambda b: b["telemetry"][0]["gpus"][1].pop("healthy"),
    "bad guid": lambda b: b["telemetry"][0]["ib_ports"][0].update(port_guid="0xABC", port=0),
    "counter<0": lambda b: b["telemetry"][0]["ib_ports"][0]["counters"].update(symbol_error=-3),
    "no xid": lambda b: b["telemetry"][0]["xid_events"][0].pop("xid"),
    "generation<0": lambda b: b["observed"].update(generation_applied=-1, partitions="no"),
    "no host": lambda b: b["telemetry"][0].pop("host"),
}


def test_the_portal_uses_the_agents_validator() -> None:
    assert protocol.validate_report is agent_protocol.validate_report
    assert protocol.validate_enrol is agent_protocol.validate_enrol


def test_a_well_formed_report_passes() -> None:
    assert protocol.validate_report(_base()) == []


@pytest.mark.parametrize("name", sorted(EDITS))
def test_every_mutation_of_a_report_is_refused_with_a_field(name: str) -> None:
    body = copy.deepcopy(_base())
    EDITS[name](body)
    problems = protocol.validate_report(body)
    assert problems and all(p["field"] for p in problems), problems


@pytest.mark.parametrize("body", [None, [], "x", {}])
def test_a_report_that_is_not_one_is_refused(body: Any) -> None:
    assert protocol.validate_report(body)


def test_a_bad_desired_state_is_refused() -> None:
    body = {"protocol": 1, "node_id": "nd_x", "generation": 1, "issued_at": "t",
            "partitions": [{"name": "bad name", "pkey": "0x7fff", "membership": "x",
                            "port_guids": ["0x1"], "members": [{"guid": "0x2"}]}],
            "access_grants": [{"account": "Root", "ssh_authorized_keys": ["a\nb"],
                               "gpu_indices": [-1]}]}
    for role in ("node", "fabric"):
        assert protocol.validate_desired_state(body, role)
