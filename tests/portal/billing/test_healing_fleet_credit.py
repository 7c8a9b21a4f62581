"""Issue 27: the healing benchmark closes the tenant's month on the production path and the
SLA credit it prints is exact to the cent against one computed from the fault intervals
(``tests/bench/healing_fleet.py``): a small pool, HTTP agent simulator, real workers."""

from __future__ import annotations

import shutil
from decimal import Decimal

import pytest

from tests.bench import healing_fleet
from tests.bench.healing_fleet import Credit

ROW = {"ChargeCategory": "Credit", "BilledCost": "-3.12", "x_CreditKind": "sla"}


def test_a_credit_is_exact_only_when_the_line_and_its_focus_row_match_the_expected() -> None:
    assert Credit(Decimal("99.0155"), Decimal("3.12"), Decimal("-3.12"), ROW).exact
    assert not Credit(Decimal("99.0155"), Decimal("3.12"), Decimal("-3.11"), ROW).exact
    assert not Credit(Decimal("99.0155"), Decimal("3.13"), Decimal("-3.13"), ROW).exact
    assert not Credit(Decimal("99.0155"), Decimal("3.12"), Decimal("-3.12"), None).exact
    assert not Credit(Decimal("99.0155"), Decimal("3.12"), Decimal("-3.12"),
                      {**ROW, "ChargeCategory": "Usage"}).exact
    assert Credit(Decimal(100), Decimal("0.00"), Decimal("0.00"), None).exact


@pytest.mark.services("postgres", "redis")
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")
def test_the_fleet_benchmark_credits_the_tenant_exactly_at_invoice_close(
        capsys: pytest.CaptureFixture[str]) -> None:
    rc = healing_fleet.main(["--nodes", "32", "--faults", "4", "--every", "2",
                             "--drain", "30"])
    out = capsys.readouterr().out
    print(out)
    assert rc == 0, out
    assert "exact to the cent" in out and "NOT" not in out
