"""Reads of leases, always through the tenant gate."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import OuterRef, Q, QuerySet, Subquery
from django.utils.translation import gettext as _

from portal.core import clock
from portal.core.errors import NotFound
from portal.inventory.models import HcaPort
from portal.leasing import migdevices
from portal.leasing.models import Allocation, Lease, LeaseEvent, MigInstance, Quota
from portal.leasing.quotas import gpus_held, quota_hours_used
from portal.leasing.states import GRANTING
from portal.tenants.access import Who, is_staff, require_role, tenants_for
from portal.tenants.models import Role, Tenant

CENT = Decimal("0.01")


def lease_list(*, user: Who, tenant: Tenant | None, state: str | None = None,
               model: str | None = None, since: datetime | None = None,
               until: datetime | None = None) -> QuerySet[Lease]:
    """The tenant's leases (platform staff with no tenant: every lease; anyone else with no
    tenant: the leases of the tenants their credential acts for)."""
    qs = Lease.objects.select_related("tenant", "created_by")
    if tenant is not None:
        require_role(user, tenant, Role.VIEWER)
        qs = qs.filter(tenant=tenant)
    elif not is_staff(user):
        qs = qs.filter(tenant__in=tenants_for(user))
    if state:
        qs = qs.filter(state__in=state.split(","))
    if model:
        # portable across PostgreSQL and SQLite (no JSON containment on SQLite)
        qs = qs.filter(Q(gpu_model=model) | Q(gpu_model="", allowed_models__icontains=f'"{model}"'))
    if since:
        qs = qs.filter(end_at__gte=since)
    if until:
        qs = qs.filter(start_at__lt=until)
    return qs.order_by("-created")


def lease_get(*, user: Who, lease_id: Any) -> Lease:
    """A lease the principal may see; anything else (another tenant, also through a key
    of this user's for another tenant; a bad id) is a 404."""
    try:
        lease = Lease.objects.select_related("tenant", "created_by").get(pk=lease_id)
    except (Lease.DoesNotExist, ValueError, TypeError, ValidationError):
        raise NotFound(_("No such lease.")) from None
    try:
        require_role(user, lease.tenant, Role.VIEWER)
    except Exception:
        raise NotFound(_("No such lease.")) from None
    return lease


def lease_events(*, lease: Lease) -> QuerySet[LeaseEvent]:
    return lease.events.order_by("created", "id")


def hca_port_facts(*, node_ids: list[Any]) -> dict[str, list[dict[str, Any]]]:
    """Per hostname: its HCA ports with the last reported P_Key table, the agent's IPoIB
    children and the tenant that holds index 0 there (the earliest granting lease's, as in
    ``desired.push_fabric``), in one query."""
    from portal.fleet.models import NodeObservedState, PortTelemetry

    reported = PortTelemetry.objects.filter(node=OuterRef("node"), device=OuterRef("device"),
                                            port=OuterRef("port_number"))
    owner = (Allocation.objects.filter(node=OuterRef("node"), live=True,
                                       lease__state__in=GRANTING)
             .order_by("lease__start_at", "lease__created", "lease_id"))
    rows = (HcaPort.objects.filter(node_id__in=node_ids)
            .annotate(reported=Subquery(reported.values("data__pkeys")[:1]),
                      ipoib_children=Subquery(NodeObservedState.objects.filter(
                          node=OuterRef("node")).values("document__ipoib_children")[:1]),
                      index0_owner=Subquery(owner.values("lease__tenant_id")[:1]))
            .values("node__hostname", "device", "port_number", "port_guid", "reported",
                    "ipoib_children", "index0_owner"))
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        out[row.pop("node__hostname")].append(row)
    return out


def lease_connection(*, lease: Lease) -> dict[str, Any]:
    """Nodes, GPUs (UUIDs), the tenant's P_Key, how to log in, and per node what NCCL/UCX
    need (HCAs, the key's P_Key index, the IPoIB interface; portal/fleet/nccl.py)."""
    from portal.fleet.models import TenantPartition
    from portal.fleet.nccl import nccl_details

    gpus: dict[str, list[dict[str, Any]]] = defaultdict(list)
    seen: set[int] = set()
    node_ids: set[Any] = set()
    for row in (Allocation.objects.filter(lease=lease).select_related("gpu", "node")
                .order_by("node__hostname", "gpu__index")):
        if row.gpu_id in seen:
            continue
        seen.add(row.gpu_id)
        node_ids.add(row.node_id)
        gpus[row.node.hostname].append({"index": row.gpu.index, "uuid": row.gpu.uuid,
                                        "model": row.gpu.model, "health": row.gpu.health})
    partition = TenantPartition.objects.filter(tenant=lease.tenant, state="active").first()
    account = f"lease-{lease.pk.hex[:12]}"
    ports = hca_port_facts(node_ids=list(node_ids)) if gpus else {}
    return {
        "account": account,
        "pkey": f"0x{partition.pkey | 0x8000:04x}" if partition else None,
        "nodes": [{"hostname": h, "ssh": f"ssh {account}@{h}", "gpus": g,
                   "hca_ports": sorted(p["port_guid"] for p in ports.get(h, [])),
                   "nccl": nccl_details(ports.get(h, []), pkey=partition.pkey,
                                        tenant_id=lease.tenant_id) if partition else None}
                  for h, g in gpus.items()],
    }


def quota_usage(*, tenant: Tenant) -> list[dict[str, Any]]:
    """Per quota row: limits and what is in use now / this month."""
    now = clock.now()
    out = []
    for quota in Quota.objects.filter(tenant=tenant).order_by("gpu_model"):
        in_use = gpus_held(tenant, quota.gpu_model, now, now + clock.timedelta_s(1)) \
            if quota.gpu_model else None
        used = quota_hours_used(tenant, quota, now)
        out.append({"gpu_model": quota.gpu_model or None, "max_gpus": quota.max_gpus,
                    "guaranteed_gpus": quota.guaranteed_gpus, "in_use_gpus": in_use,
                    "gpu_hour_budget": quota.gpu_hour_budget,
                    "gpu_hours_this_month": used.total.quantize(CENT),
                    "gpu_hours_metered": used.metered.quantize(CENT),
                    "gpu_hours_committed": used.committed.quantize(CENT),
                    "max_lease_hours": quota.max_lease_hours,
                    "max_pending_orders": quota.max_pending_orders,
                    "allow_spot": quota.allow_spot, "allow_borrowing": quota.allow_borrowing})
    return out


QUEUE_LIMIT = 500  # as many as a scheduling pass considers (lifecycle.placing.PASS_LIMIT)


def queue_positions() -> dict[str, int]:
    """Lease id → its 1-based place among the queued orders that want to start now, in
    the order the next scheduling pass considers them. Future bookings are not queued
    for GPUs yet, so they hold no place."""
    from portal.leasing import allocation
    from portal.leasing.models import LeaseState

    now = clock.now()
    queue = list(Lease.objects.filter(state=LeaseState.QUEUED, start_at__lte=now)
                 .select_related("tenant").order_by("-queue_boost", "created")[:QUEUE_LIMIT])
    return allocation.queue_positions(queue, now) if queue else {}


def queue_position(*, lease: Lease) -> int | None:
    """The place of one waiting order (None when it is not waiting in the queue now)."""
    from portal.leasing.models import LeaseState

    if lease.state != LeaseState.QUEUED or lease.start_at > clock.now():
        return None
    return queue_positions().get(str(lease.id))


def lease_faults(*, lease: Lease) -> Any:
    """The lease's failed hardware, oldest first (the lease came through ``lease_get``)."""
    from portal.leasing.models import LeaseFault

    return LeaseFault.objects.filter(lease=lease).select_related("node").order_by("fault_at")


def mig_devices(lease: Lease) -> list[dict[str, Any]]:
    """The lease's live MIG instances (all, once it ended), in GPU and slot order, each
    with ``pending_reset`` when its GPU's MIG mode change waits for a GPU reset."""
    rows = MigInstance.objects.filter(lease=lease)
    if rows.filter(allocation__live=True).exists():
        rows = rows.filter(allocation__live=True)
    found = list(rows.order_by("gpu__node__hostname", "gpu__index", "start").values_list(
        "gpu__node_id", "gpu__node__hostname", "gpu__index", "profile", "start", "uuid"))
    waiting = migdevices.pending_reset({row[0] for row in found}) if found else set()
    return [{"node": hostname, "gpu_index": index, "profile": profile, "start": start,
             "uuid": uuid, "pending_reset": not uuid and (node_id, index) in waiting}
            for node_id, hostname, index, profile, start, uuid in found]


def cuda_visible_devices(devices: list[dict[str, Any]]) -> str | None:
    """``CUDA_VISIBLE_DEVICES`` for these MIG devices, once every UUID is known."""
    if not devices or not all(d["uuid"] for d in devices):
        return None
    return ",".join(d["uuid"] for d in devices)


def mig_offer(*, models: list[str], cap: int = 56) -> list[dict[str, Any]]:
    """The MIG profiles of ``models`` with how many instances of each could be placed now
    (``free_now``, counted up to ``cap``): what the order page offers (ADR 0222)."""
    from portal.core import clock
    from portal.leasing import allocation

    profiles = sorted({p for m in models for p in allocation.mig_profiles(m)},
                      key=lambda p: (int(p.split("g", 1)[0]), p))
    free = allocation.mig_free_now(models, profiles, clock.now(), cap) if profiles else {}
    return [{"profile": p, "free_now": free[p]} for p in profiles]
