"""Issue 27 in the browser's pages: a degraded lease says so and takes the tenant's choice;
the failed hardware is listed; the console's repair queue shows it with its cause."""

from __future__ import annotations

from typing import Any

from django.test import Client
from django.urls import reverse

from portal.fleet.services import faults
from portal.inventory.models import Node
from portal.leasing.models import Allocation, Condition
from tests.portal.driving import drive
from tests.portal.factories import make_user
from tests.portal.web.conftest import active_lease
from tests.portal.web.conftest import client_for as page_client


def test_a_degraded_lease_page_offers_the_choice_and_lists_the_failure(
        pool: dict[str, Any], alice: Client) -> None:
    lease = active_lease(pool, gpu_count=8, nodes=2, locality="leaf", locality_required=True)
    host = Allocation.objects.filter(lease=lease).values_list("node__hostname", flat=True)[0]
    faults.node_failed(node=Node.objects.get(hostname=host), cause="xid 79", rule="xid.79")
    drive()
    lease.refresh_from_db()
    assert lease.condition == Condition.DEGRADED
    url = reverse("web:lease", kwargs={"lease_id": lease.pk})
    body = alice.get(url).content.decode()
    assert "This lease runs degraded" in body and 'value="continue"' in body
    assert "Failed hardware" in body and host in body and "xid 79" in body
    resp = alice.post(reverse("web:lease_degraded", kwargs={"lease_id": lease.pk}),
                      {"choice": "continue"})
    assert resp.status_code == 302
    lease.refresh_from_db()
    assert lease.condition == Condition.HEALTHY

    staff = page_client(make_user("ops", staff=True))
    queue = staff.get(reverse("console:repair")).content.decode()
    assert host in queue and "xid 79" in queue
