"""Findings 8 and 9 (issue 13): the console in Chinese, and readable.

Old code: node states, GPU health, invoice states, priorities, credit kinds, audit filters
and timeline events ("expiry_warning") were English in the Chinese console; money lost its
thousands separators; the lease page mixed two date formats; the audit log showed ISO
timestamps with microseconds and Python dict dumps; "Node state changed." appeared twice;
the console wrote P_Key 0x0100 where the tenant's lease page wrote 0x8100.
"""

from __future__ import annotations

import re
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from portal.billing.models import CreditLine, Invoice
from portal.core import clock
from portal.core.services import audit_record
from portal.fleet.models import TenantPartition
from portal.leasing import states
from tests.portal.factories import make_user
from tests.portal.web.conftest import active_lease, client_for


def _staff(language: str = "en") -> Client:
    client = client_for(make_user("op", staff=True))
    client.post("/i18n/setlang/", {"language": language, "next": "/"})
    return client


@pytest.fixture
def zh(pool: dict[str, Any]) -> Client:
    return _staff("zh-hans")


def test_console_chinese_node_state_and_gpu_health(zh: Client) -> None:
    body = zh.get(reverse("console:node", kwargs={"hostname": "gpu-node-0001"})).content.decode()
    node_state = re.search(r'id="node-state">([^<]+)<', body)
    assert node_state and node_state.group(1) == "就绪"
    assert "<td>健康</td>" in body and ">Healthy<" not in body
    assert '<option value="maintenance">维护中</option>' in body


def test_console_chinese_invoice_status_credit_kind_and_tenant_status(
        pool: dict[str, Any], zh: Client) -> None:
    month = date(2026, 11, 1)
    Invoice.objects.create(tenant=pool["a"], month=month, currency="USD",
                           total=Decimal("12345.67"), usage_total=Decimal("12345.67"))
    CreditLine.objects.create(tenant=pool["a"], month=month, source_month=month,
                              category=CreditLine.Category.CREDIT, amount=Decimal("-1000.00"),
                              currency="USD", description="x", period_start=clock.now(),
                              period_end=clock.now() + timedelta(hours=1))
    body = zh.get(reverse("console:tenant", kwargs={"slug": "a"})).content.decode()
    assert "草稿" in body and "抵扣 (手动)" in body and "正常" in body
    assert "12,345.67" in body and "-1,000.00" in body  # thousands separators
    tenants = zh.get(reverse("console:tenants")).content.decode()
    assert "<td>正常</td>" in tenants
    billing = zh.get(reverse("console:billing")).content.decode()
    assert "<td>草稿</td>" in billing and "12,345.67" in billing


def test_console_chinese_audit_filters(zh: Client) -> None:
    body = zh.get(reverse("console:audit")).content.decode()
    assert "操作人 <input" in body and "对象类型 <input" in body


def test_console_audit_log_readable(pool: dict[str, Any]) -> None:
    audit_record(actor=pool["adam"], action="lease.extend", tenant=pool["a"],
                 changes={"end_at": ["2026-11-02T11:00:00+00:00", "2026-11-02T13:00:00+00:00"],
                          "spec": {"gpus": 8, "models": ["H100", "A100"]}})
    body = _staff().get(reverse("console:audit")).content.decode()
    assert "end_at: 2026-11-02T11:00:00+00:00 → 2026-11-02T13:00:00+00:00" in body
    assert "spec: gpus=8, models=H100, A100" in body
    assert "{&#x27;" not in body and "{'" not in body  # no Python dict dump
    shown = re.findall(r"<time [^>]*>([^<]+)</time>", body)
    assert shown and all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", t) for t in shown)


def test_console_node_state_changed_shown_once(pool: dict[str, Any]) -> None:
    url = reverse("console:node", kwargs={"hostname": "gpu-node-0004"})
    body = _staff().post(url, {"state": "maintenance", "confirm": "yes", "reason": "fan"},
                         follow=True).content.decode()
    assert body.count("Node state changed.") == 1


def test_console_pkey_one_notation(pool: dict[str, Any], alice: Client) -> None:
    lease = active_lease(pool)
    partition = TenantPartition.objects.get(tenant=pool["a"])
    full = f"0x{partition.pkey | 0x8000:04x}"
    lease_page = alice.get(reverse("web:lease", kwargs={"lease_id": lease.pk})).content.decode()
    console = _staff().get(reverse("console:partitions")).content.decode()
    assert full in lease_page and f">{full}</td>" in console


def test_timeline_expiry_warning_in_chinese(pool: dict[str, Any]) -> None:
    lease = active_lease(pool)
    states.record(lease, "expiry_warning", reason="ends within 30 minutes")
    zh = client_for(pool["alice"])
    zh.post("/i18n/setlang/", {"language": "zh-hans", "next": "/"})
    body = zh.get(reverse("web:lease", kwargs={"lease_id": lease.pk})).content.decode()
    assert "到期提醒" in body and "将在 30 分钟内结束" in body
    assert "expiry_warning" not in body.split('id="lease-main"')[1].split("<script")[0]


def test_lease_page_one_date_format(pool: dict[str, Any], alice: Client) -> None:
    """Summary and timeline write a moment the same way (was DATETIME and SHORT_DATETIME)."""
    lease = active_lease(pool)
    body = alice.get(reverse("web:lease", kwargs={"lease_id": lease.pk})).content.decode()
    timeline = re.findall(r"<time datetime=[^>]*>([^<]+)</time>", body)
    ordered = re.search(r"Ordered by</dt><dd>[^,]+, ([^<]+)</dd>", body)
    assert timeline and ordered
    assert ordered.group(1) in timeline  # the order event: the same moment, the same text
