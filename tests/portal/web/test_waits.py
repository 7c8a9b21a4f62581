"""Finding 6 (issue 13): waiting, in words.

Old code: raw codes ("insufficient_capacity", "topology") in both languages; the lease page
showed neither the wait reason nor the earliest start; a queued lease showed its order time
as its start; an accepted future reservation read "Queued"; the preview said "Can start
now" for a start days ahead.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.test import Client
from django.urls import reverse

from portal.core import clock
from portal.inventory.models import Node
from portal.leasing.models import Lease, Quota
from tests.portal.web.conftest import client_for, drive, later, order, order_form


def _page(client: Client, lease: Lease) -> str:
    return client.get(reverse("web:lease", kwargs={"lease_id": lease.pk})).content.decode()


def _dd(body: str, testid: str) -> str:
    found = re.search(rf'data-testid="{testid}">(.*?)</dd>', body, re.S)
    assert found, testid
    return found.group(1)


def _split_leaves() -> None:
    """One node of each 2-node leaf in maintenance: 16 GPUs free, never 2 nodes in a leaf
    (a gang that can never fit a leaf at all is refused at order time: test_never_fits)."""
    Node.objects.filter(hostname__in=["gpu-node-0001", "gpu-node-0003"]).update(
        state=Node.State.MAINTENANCE)


def _topology_wait(pool: dict[str, Any]) -> Lease:
    """2 nodes in one leaf while each leaf has one node free: the scheduler says "topology"."""
    _split_leaves()
    lease = order(pool, gpu_count=8, nodes=2, locality="leaf", locality_required=True)
    drive()
    lease.refresh_from_db()
    assert (lease.state, lease.wait_reason) == ("queued", "topology")
    return lease


def test_waits_lease_page_says_why_in_words(pool: dict[str, Any], alice: Client) -> None:
    wait = _dd(_page(alice, _topology_wait(pool)), "wait-reason")
    assert wait.startswith("16 GPUs of H100 are free, but not within one leaf switch as "
                           "required")
    assert "topology" not in wait


def test_waits_lease_page_says_why_in_chinese(pool: dict[str, Any]) -> None:
    lease = _topology_wait(pool)
    zh = client_for(pool["alice"])
    zh.post("/i18n/setlang/", {"language": "zh-hans", "next": "/"})
    wait = _dd(_page(zh, lease), "wait-reason")
    assert "有 16 个 H100 GPU 空闲" in wait and "topology" not in wait


def test_waits_lease_page_shows_the_earliest_start(pool: dict[str, Any],
                                                   alice: Client) -> None:
    lease = order(pool)
    at = clock.now() + timedelta(hours=4)
    Lease.objects.filter(pk=lease.pk).update(state="queued", wait_reason="insufficient_capacity",
                                             earliest_start=at)
    body = _page(alice, lease)
    assert "Not enough free H100 GPUs for 8 GPUs right now" in _dd(body, "wait-reason")
    assert "Earliest start: 2026-11-02 13:00 UTC." in _dd(body, "wait-reason")
    assert "(earliest)" in _dd(body, "lease-start")


def test_waits_queued_lease_shows_no_fake_start(pool: dict[str, Any], alice: Client) -> None:
    lease = _topology_wait(pool)
    assert lease.earliest_start is None and lease.start_at == clock.now()
    assert "not known yet" in _dd(_page(alice, lease), "lease-start")
    listing = alice.get(reverse("web:leases")).content.decode()
    assert "waiting" in listing


def test_waits_confirmed_future_reservation_reads_scheduled(pool: dict[str, Any],
                                                            alice: Client) -> None:
    lease = order(pool, start_at=clock.now() + timedelta(days=2))
    Lease.objects.filter(pk=lease.pk).update(state="queued", wait_reason="not_yet")
    body = _page(alice, lease)
    badge = re.search(r'<span class="badge [a-z]+" data-state="queued">([^<]+)</span>', body)
    assert badge and badge.group(1) == "Scheduled"


def test_waits_preview_of_a_future_start_does_not_say_now(alice: Client) -> None:
    body = alice.post(reverse("web:order_preview"),
                      order_form(start="later", start_at=later(48))).content.decode()
    assert "Can start now" not in body
    assert "Can start at the chosen time (2026-11-04 09:00 UTC)" in body


def test_waits_preview_says_why_in_words(alice: Client) -> None:
    _split_leaves()
    body = alice.post(reverse("web:order_preview"), order_form(
        gpu_count="8", nodes="2", locality="leaf", locality_required="on")).content.decode()
    why = re.search(r'data-testid="wait-reason">(.*?)</p>', body, re.S)
    assert why and "not within the required locality" in why.group(1)
    assert "topology" not in why.group(1)


def test_waits_calendar_places_a_waiting_order_at_its_earliest_start(
        pool: dict[str, Any], alice: Client) -> None:
    """Old code drew a waiting order from its order time (a start it never had)."""
    lease = order(pool)
    at = clock.now() + timedelta(hours=5)
    Lease.objects.filter(pk=lease.pk).update(state="queued", wait_reason="insufficient_capacity",
                                             earliest_start=at)
    rows = alice.get(reverse("web:calendar")).context["rows"]
    row = next(r for r in rows if r["lease"].pk == lease.pk)
    assert (row["begin"], row["finish"]) == (at, at + timedelta(hours=2))


def test_waits_queue_position_on_the_lease_page_and_in_the_api(pool: dict[str, Any],
                                                               alice: Client) -> None:
    """Issue 13: a waiting order showed why and when, but not where it stands in the
    queue; neither the page nor the API had a position. Now both show its place in the
    order the next scheduling pass considers the queue."""
    Quota.objects.filter(tenant=pool["a"]).update(max_gpus=64)
    for _ in range(4):  # 4 nodes x 8 GPUs: the pool is full
        order(pool, duration_hours=Decimal(8))
    drive()
    first, second = order(pool), order(pool)
    drive()
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.state, second.state) == ("queued", "queued")
    assert _dd(_page(alice, first), "queue-position") == "No. 1 in the queue"
    assert _dd(_page(alice, second), "queue-position") == "No. 2 in the queue"
    listed = {row["id"]: row["queue_position"]
              for row in alice.get("/api/v1/leases/").json()["results"]}
    assert listed[str(first.pk)] == 1 and listed[str(second.pk)] == 2
    running = [k for k, v in listed.items() if v is None]
    assert len(running) == 4
    one = alice.get(f"/api/v1/leases/{second.pk}/").json()
    assert one["queue_position"] == 2


def test_waits_queued_lease_end_is_not_before_its_start(pool: dict[str, Any],
                                                        alice: Client) -> None:
    """The journey found it: a waiting order showed its earliest start (14:10) and the end
    counted from its order time (13:10), an end before the start. The end shown is now
    the earliest start plus the duration."""
    lease = order(pool)  # 2 hours, ordered at 09:00
    at = clock.now() + timedelta(hours=4)
    Lease.objects.filter(pk=lease.pk).update(state="queued", wait_reason="insufficient_capacity",
                                             earliest_start=at)
    body = _page(alice, lease)
    end = re.search(r'id="lease-end">(.*?)</dd>', body, re.S)
    assert end and "3 p.m." in end.group(1), end  # 09:00 + 4 h + 2 h = 15:00 UTC
