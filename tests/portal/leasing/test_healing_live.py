"""Issue 27's acceptance on the production path: real agent processes (and OpenSM on ibsim
where installed), faults injected from outside the running agents — a member node falls
silent, its IB port goes down, a GPU reports XID 79, another XID 48 — and each time the
failed part is fenced and a replacement is active within 60 s of the fault (silence: within
30 s after the unreachable threshold), the tenant's event names the replacement, the failed
part is offered to nobody, and no GPU slot is in two live allocations
(``tests/bench/healing.py``)."""

from __future__ import annotations

import shutil

import pytest

from tests.bench import healing

pytestmark = [pytest.mark.services("postgres", "redis"), pytest.mark.slow]


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")
def test_failed_hardware_leaves_running_leases_with_real_agents(capsys: pytest.CaptureFixture
                                                                [str]) -> None:
    rc = healing.main(["--nodes", "6", "--timeout", "90"])
    out = capsys.readouterr().out
    print(out)
    assert rc == 0, out
    assert "— met" in out and "invariants: hold" in out
