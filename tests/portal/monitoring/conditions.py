"""The database states the metrics and the alert rules are tested on, built with plain rows
(no scheduler run): a healthy portal, and one in every kind of trouble an alert names.
``scrape`` reads the real ``/metrics`` over HTTP (Django's test client)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import redis
from django.conf import settings
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from portal.core import histograms
from portal.fleet.models import NodeHealth
from portal.inventory.generator import ClusterSpec, cluster_generate
from portal.inventory.models import Gpu, Node, Service
from portal.leasing.models import Lease, LeaseState
from portal.webhooks.models import Endpoint, Message
from tests.portal.factories import make_tenant

TOKEN = "metrics-test-token"
QUEUE = "gpupool-metrics-test"  # a queue of its own: no worker consumes test messages
PASS = "gpupool_schedule_pass_duration_seconds"
ACTIVATION = "gpupool_order_to_active_seconds"


def scrape_text(client: Client | None = None) -> str:
    response = (client or Client()).get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.content
    return response.content.decode()


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """``{(name, labels): value}`` of every sample in the exposition."""
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(scraped: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
          **labels: str) -> float:
    return scraped[(name, frozenset(labels.items()))]


def _lease(tenant: Any, state: str, *, created_ago_s: float, start_ago_s: float | None = None,
           active_after_s: float | None = None, wait_reason: str = "") -> Lease:
    """A lease row; one that became active is observed as provisioning does (the
    end-to-end path: test_metrics.test_an_order_driven_to_active_is_observed)."""
    now = timezone.now()
    created = now - timedelta(seconds=created_ago_s)
    start = now - timedelta(seconds=start_ago_s if start_ago_s is not None else created_ago_s)
    lease = Lease.objects.create(tenant=tenant, allowed_models=["H100"], state=state,
                                 start_at=start, end_at=start + timedelta(hours=2),
                                 wait_reason=wait_reason)
    active = (max(created, start) + timedelta(seconds=active_after_s)
              if active_after_s is not None else None)
    Lease.objects.filter(pk=lease.pk).update(created=created, active_at=active)
    if active_after_s is not None:
        histograms.observe(ACTIVATION, active_after_s)
    return lease


def _message(endpoint: Endpoint, *, due_ago_s: float | None, status: str = "pending") -> None:
    at = timezone.now() - timedelta(seconds=due_ago_s) if due_ago_s is not None else None
    Message.objects.create(msg_id=f"msg_{uuid.uuid4().hex}", endpoint=endpoint,
                           event_type="lease.active", body="{}", status=status,
                           next_attempt_at=at)


def _broker(count: int) -> None:
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(QUEUE)
    if count:
        client.rpush(QUEUE, *[b"{}"] * count)


def own_queue(settings: Any) -> None:
    """Count only this harness's queue. Other tests leave messages in the shared broker's
    ``celery`` and ``control`` queues (no worker consumes there), and since the control
    queue was configured (``CELERY_TASK_QUEUES``) the collector counts those too: a long
    run left over 500 and the quiet portal raised GpupoolCeleryBacklog."""
    settings.CELERY_TASK_DEFAULT_QUEUE = QUEUE
    settings.CELERY_TASK_QUEUES = ()


def clear_broker() -> None:
    redis.Redis.from_url(settings.REDIS_URL).delete(QUEUE)


def fleet(nodes: int = 20) -> list[Node]:
    """``nodes`` nodes of 8 GPUs, all reporting (made once; later calls reuse them)."""
    if not Node.objects.exists():
        cluster_generate(actor=None, spec=ClusterSpec(nodes=nodes, gpus_per_node=8))
    now = timezone.now()
    Node.objects.update(last_heartbeat=now - timedelta(seconds=2))
    for node in Node.objects.all():
        NodeHealth.objects.update_or_create(node=node, defaults={"reachable": True})
    return list(Node.objects.order_by("hostname"))


def healthy() -> None:
    """A quiet portal: one order just placed, fast passes, agents on time, nothing in
    repair, webhooks delivered, an empty broker."""
    tenant = make_tenant("quiet")
    fleet()
    _lease(tenant, LeaseState.ACTIVE, created_ago_s=600, active_after_s=4)
    _lease(tenant, LeaseState.QUEUED, created_ago_s=3, wait_reason="insufficient_capacity")
    endpoint = Endpoint.objects.create(tenant=tenant, url="https://93.184.215.14/hook",
                                       events=["lease.active"], secret="whsec_x")
    _message(endpoint, due_ago_s=None, status="delivered")
    for seconds in (0.02, 0.03, 0.2):
        histograms.observe(PASS, seconds)
    _broker(0)


def troubled() -> None:
    """Everything wrong at once: an order waiting two hours for capacity (and one for
    quota), slow passes, 3 of 20 agents silent for 10 minutes and 2 nodes unreachable,
    4 nodes in repair and 2 validating, webhooks 20 minutes overdue, 900 Celery messages."""
    tenant = make_tenant("busy")
    nodes = fleet()
    _lease(tenant, LeaseState.QUEUED, created_ago_s=7200, wait_reason="insufficient_capacity")
    _lease(tenant, LeaseState.QUEUED, created_ago_s=60, wait_reason="quota")
    _lease(tenant, LeaseState.REQUESTED, created_ago_s=1)
    _lease(tenant, LeaseState.ACTIVE, created_ago_s=900, active_after_s=45)
    _lease(tenant, LeaseState.ENDED, created_ago_s=5000, active_after_s=700)
    silent = [n.pk for n in nodes[:3]]
    Node.objects.filter(pk__in=silent).update(
        last_heartbeat=timezone.now() - timedelta(seconds=600))
    NodeHealth.objects.filter(node_id__in=silent[:2]).update(reachable=False)
    Node.objects.filter(pk__in=[n.pk for n in nodes[10:14]]).update(
        service=Service.OUT_OF_SERVICE)
    Node.objects.filter(pk__in=[n.pk for n in nodes[14:16]]).update(service=Service.VALIDATING)
    Gpu.objects.filter(node_id__in=[n.pk for n in nodes[10:14]]).update(
        service=Service.OUT_OF_SERVICE)
    Gpu.objects.filter(node=nodes[16], index__lt=2).update(service=Service.SUSPECT)
    endpoint = Endpoint.objects.create(tenant=tenant, url="https://93.184.215.14/hook",
                                       events=["lease.active"], secret="whsec_x")
    _message(endpoint, due_ago_s=1200)
    _message(endpoint, due_ago_s=30)
    _message(endpoint, due_ago_s=-3600)  # retrying later: pending, not due
    for seconds in (12.0, 20.0, 25.0, 0.3):
        histograms.observe(PASS, seconds)
    _broker(900)
