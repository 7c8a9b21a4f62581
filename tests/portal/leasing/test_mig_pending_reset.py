"""Issue 28: a MIG lease whose GPU's MIG mode change waits for a GPU reset says so in words
(page) and as ``pending_reset`` on each device (API), instead of waiting silently."""

from __future__ import annotations

from typing import Any

from django.test import Client
from django.urls import reverse
from django.utils import translation

from portal.fleet.models import NodeObservedState
from portal.inventory.models import Node
from portal.leasing.lifecycle import placing, provisioning
from portal.leasing.models import LeaseState as S
from portal.leasing.selectors import mig_devices
from portal.web.waits import mig_pending_reset
from tests.portal.factories import client_for
from tests.portal.leasing import test_mig_orders as orders

mig_pool = orders.mig_pool  # the fixture: one H100 node, GPU 0 offered for MIG
order = orders.order
PENDING = {"mig": [{"gpu_index": 0, "mode": "pending_reset", "errors": [], "instances": []}]}


def _placed(pool: dict[str, Any]) -> Any:
    lease = order(pool, 0)
    placing.run_schedule_pass()
    provisioning.provision(lease.pk)  # granted; no agent has made the instance yet
    lease.refresh_from_db()
    assert lease.state == S.PROVISIONING, lease.state
    return lease


def test_a_gpu_waiting_for_a_reset_is_said_in_words(mig_pool: dict[str, Any]) -> None:
    lease = _placed(mig_pool)
    node = Node.objects.get()
    (device,) = mig_devices(lease)
    assert device["pending_reset"] is False and mig_pending_reset([device]) == ""
    NodeObservedState.objects.update_or_create(node=node, defaults={"document": PENDING})
    (device,) = mig_devices(lease)
    assert device["pending_reset"] is True
    api = client_for(mig_pool[0]).get(reverse("lease-detail", kwargs={"pk": lease.pk})).json()
    assert [d["pending_reset"] for d in api["devices"]] == [True]
    web = Client()
    web.force_login(mig_pool[0])
    page = web.get(reverse("web:lease", kwargs={"lease_id": lease.pk})).content.decode()
    assert "Pending GPU reset" in page and f"GPU 0 of {node.hostname}" in page
    with translation.override("zh-hans"):
        text = mig_pending_reset([device])
    assert "等待 GPU 重置" in text and node.hostname in text


def test_another_gpus_pending_reset_is_not_this_leases(mig_pool: dict[str, Any]) -> None:
    lease = _placed(mig_pool)
    other = {"mig": [{**PENDING["mig"][0], "gpu_index": 3}]}
    NodeObservedState.objects.update_or_create(node=Node.objects.get(),
                                               defaults={"document": other})
    assert [d["pending_reset"] for d in mig_devices(lease)] == [False]
