import pytest

from agents import protocol


def _report() -> dict:
    return {
        "protocol": 1, "node_id": "nd_1", "seq": 1, "created_at": "2026-11-29T23:40:00+00:00",
        "agent_version": "0.1.0", "dropped_reports": 0,
        "observed": {"generation_applied": 0},
        "telemetry": [{"ts": 1.0, "host": {"hostname": "h"},
                       "gpus": [{"index": 0, "healthy": True, "power_w": 100.5}],
                       "ib_ports": [{"device": "mlx5_0", "port": 1, "counters": {"x": 1},
                                     "saturated": [], "port_guid": "0x0000000000100009"}]}],
    }


def test_valid_report() -> None:
    assert protocol.validate_report(_report()) == []


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda r: r.update(protocol=2), "protocol"),
    (lambda r: r.pop("seq"), "seq"),
    (lambda r: r.update(seq=True), "seq"),
    (lambda r: r.update(seq=0), "seq"),
    (lambda r: r["telemetry"][0]["gpus"][0].update(power_w=-1), "telemetry[0].gpus[0].power_w"),
    (lambda r: r["telemetry"][0]["gpus"][0].update(power_w="0"), "telemetry[0].gpus[0].power_w"),
    (lambda r: r["telemetry"][0]["ib_ports"][0]["counters"].update(x=-5),
     "telemetry[0].ib_ports[0].counters.x"),
    (lambda r: r["telemetry"][0]["ib_ports"][0].update(port_guid="ec0d:9a03"),
     "telemetry[0].ib_ports[0].port_guid"),
    (lambda r: r.update(telemetry=[{}] * 121), "telemetry"),
    (lambda r: r["observed"].pop("generation_applied"), "observed.generation_applied"),
])
def test_invalid_reports_name_the_field(mutate, field) -> None:  # type: ignore[no-untyped-def]
    r = _report()
    mutate(r)
    assert field in {p["field"] for p in protocol.validate_report(r)}


def test_non_object() -> None:
    assert protocol.validate_report([1]) == [{"field": "$", "problem": "must be an object"}]


def test_desired_state_validation() -> None:
    good = {"protocol": 1, "node_id": "n", "generation": 1, "issued_at": "x",
            "partitions": [{"name": "a", "pkey": "0x0101", "membership": "full",
                            "port_guids": ["0x0000000000100009"]}],
            "access_grants": [{"lease_id": "l", "account": "lease-1", "gpu_indices": [0],
                               "ssh_authorized_keys": ["ssh-ed25519 AAAA a@b"]}]}
    assert protocol.validate_desired_state(good) == []
    bad = {**good, "partitions": [{"name": "a", "pkey": "0x7fff", "membership": "both"}],
           "access_grants": [{"lease_id": "l", "account": "Root!", "gpu_indices": [-1],
                              "ssh_authorized_keys": ["ssh-rsa A\nssh-rsa B"]}]}
    fields = {p["field"] for p in protocol.validate_desired_state(bad)}
    assert fields == {"partitions[0].pkey", "partitions[0].membership", "partitions[0].port_guids",
                      "access_grants[0].account",
                      "access_grants[0].gpu_indices[0]",
                      "access_grants[0].ssh_authorized_keys[0]"}
    fabric = {"protocol": 1, "node_id": "f", "generation": 2, "issued_at": "x", "partitions": [
        {"name": "t", "pkey": "0x0101", "members": [{"guid": "0x0000000000100009",
                                                     "membership": "limited"}]}]}
    assert protocol.validate_desired_state(fabric, role="fabric") == []


def test_enrol_validation() -> None:
    assert protocol.validate_enrol({"protocol": 1, "bootstrap_token": "t", "role": "node",
                                    "hostname": "h", "agent_version": "1"}) == []
    assert {p["field"] for p in protocol.validate_enrol({"protocol": 1, "role": "x"})} == {
        "bootstrap_token", "role", "hostname", "agent_version"}


def test_real_h200_sample_is_a_valid_telemetry_item() -> None:
    import json
    from pathlib import Path

    item = json.loads((Path(__file__).resolve().parents[1] / "fixtures/nvml/h200-once.json")
                      .read_text())
    report = {**_report(), "telemetry": [item]}
    assert protocol.validate_report(report) == []
    gpu = item["gpus"][0]
    assert gpu["name"] == "NVIDIA H200"
    assert "nvlink_active" not in gpu  # NotSupported on that VM: absent, not []
    assert 0 < gpu["power_w"] < 1000  # W, not mW
