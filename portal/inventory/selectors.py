"""Reads of the inventory. Staff see everything; tenants see availability only."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Q, QuerySet

from portal.inventory.models import Fabric, Gpu, Node, Service, StorageEndpoint, Switch


def node_list() -> QuerySet[Node]:
    return (Node.objects.select_related("leaf", "fabric")
            .annotate(gpu_count=Count("gpus")).order_by("hostname"))


def gpu_list() -> QuerySet[Gpu]:
    return Gpu.objects.select_related("node").order_by("node__hostname", "index")


def switch_list() -> QuerySet[Switch]:
    return Switch.objects.select_related("fabric").order_by("fabric__name", "role", "description")


def fabric_list() -> QuerySet[Fabric]:
    return Fabric.objects.annotate(switch_count=Count("switches", distinct=True),
                                   node_count=Count("nodes", distinct=True)).order_by("name")


# What may be offered: a ready node in service, a healthy GPU in service (fleet lifecycle).
SCHEDULABLE = Q(node__state=Node.State.READY, node__service=Service.IN_SERVICE,
                health=Gpu.Health.HEALTHY, service=Service.IN_SERVICE)


def schedulable_gpus() -> QuerySet[Gpu]:
    return Gpu.objects.filter(SCHEDULABLE)


def capacity_by_model() -> list[dict[str, Any]]:
    """Per GPU model: installed GPUs, schedulable ones (ready node, healthy GPU), nodes."""
    rows = (Gpu.objects.values("model").annotate(
        gpus_total=Count("id"),
        gpus_schedulable=Count("id", filter=SCHEDULABLE),
        nodes=Count("node", distinct=True),
    ).order_by("model"))
    return list(rows)


def storage_endpoint_list(*, fabric: Fabric | None = None) -> QuerySet[StorageEndpoint]:
    qs = StorageEndpoint.objects.select_related("fabric")
    return qs.filter(fabric=fabric) if fabric is not None else qs


def storage_guids(*, fabric_ids: set[int | None]) -> set[str]:
    """Storage port GUIDs on these fabrics; a port of unknown fabric (None) may sit on any,
    so it draws every fabric's storage."""
    qs = StorageEndpoint.objects.all()
    if None not in fabric_ids:
        qs = qs.filter(fabric_id__in=fabric_ids)
    return set(qs.values_list("port_guid", flat=True))
