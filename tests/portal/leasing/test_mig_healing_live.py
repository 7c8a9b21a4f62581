"""Issues 27 and 28 on the production path: a tenant's MIG instance lease on a GPU that
fails (XID 48: the GPU; XID 79: its node) with the REAL node agents — the fault appended
to the running agent's fake-NVML control file from outside — is fenced (the agent applied a
grant without it) and healed: a new instance on another GPU, created and reported by the
agent with its own ``MIG-…`` UUID, the lease active and whole again within 60 s, a
``healed`` event naming the replacement, the failed part offered to nobody
(``tests/bench/healing_mig.py``)."""

from __future__ import annotations

import shutil

import pytest

from tests.bench import healing_mig

pytestmark = [pytest.mark.services("postgres", "redis"), pytest.mark.slow]


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")
def test_failed_mig_gpu_heals_its_instances_with_real_agents(
        capsys: pytest.CaptureFixture[str]) -> None:
    rc = healing_mig.main(["--nodes", "2", "--timeout", "90"])
    out = capsys.readouterr().out
    print(out)
    assert rc == 0, out
    assert "— met" in out and "invariants: hold" in out
