"""Findings of the zh-hans journey (tests/browser/test_journey.py) on the console, checked
without a browser. Old code: the enrolments page and the "Enrolments" nav item were
English in zh-hans; the console's role, priority and credit-kind choices were the models'
English labels ("Owner", "On demand", "Adjustment"); the fabric map's and the members'
strings were new. Each console page is rendered in zh-hans and searched for them."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from portal.inventory.generator import ClusterSpec, cluster_generate
from portal.tenants.models import Role
from tests.portal.factories import add_member, make_tenant, make_user

ENGLISH = ["Enrolments", "Approve", "Deny", "Show all", "Owner", "Admin", "Viewer",
           "On demand", "Reserved", "Adjustment", "Credit", "Change role", "Invite a member",
           "Send invitation", "Members", "No leaf switch", "One column per leaf", "cables",
           "Queue position"]


@pytest.fixture
def zh(db: Any, settings: Any) -> Client:
    settings.AXES_ENABLED = False
    tenant = make_tenant("a")
    add_member(tenant, "a-boss", Role.ADMIN)
    cluster_generate(actor=None, spec=ClusterSpec(nodes=2, gpus_per_node=2))
    client = Client()
    client.force_login(make_user("ops", staff=True))
    client.post("/i18n/setlang/", {"language": "zh-hans", "next": "/"})
    return client


def _text(html: str) -> str:
    html = re.sub(r"<(script|style|title)\b.*?</\1>", " ", html, flags=re.S)
    return re.sub(r"<[^>]+>", " ", html)


@pytest.mark.parametrize("name", ["console:enrolments", "console:fabric", "console:tenant"])
def test_console_pages_in_chinese_have_no_english_ui_words(zh: Client, name: str) -> None:
    url = reverse(name, args=["a"]) if name == "console:tenant" else reverse(name)
    text = _text(zh.get(url).content.decode())
    left = [w for w in ENGLISH if re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", text)]
    assert left == []
