"""Reads of leases, always through the tenant gate."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet
from django.utils.translation import gettext as _

from portal.core import clock
from portal.core.errors import NotFound
from portal.inventory.models import HcaPort
from portal.leasing.models import Allocation, Lease, LeaseEvent, Quota
from portal.leasing.quotas import gpus_held, quota_hours_used
from portal.tenants.access import AnyUser, is_staff, require_role, tenants_for
from portal.tenants.models import Role, Tenant

CENT = Decimal("0.01")


def lease_list(*, user: AnyUser, tenant: Tenant | None, state: str | None = None,
               model: str | None = None, since: datetime | None = None,
               until: datetime | None = None) -> QuerySet[Lease]:
    """The tenant's leases (staff with no tenant: every lease)."""
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


def lease_get(*, user: AnyUser, lease_id: Any) -> Lease:
    """A lease the user may see; anything else (other tenant, bad id) is a 404."""
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


def lease_connection(*, lease: Lease) -> dict[str, Any]:
    """Nodes, GPUs (UUIDs), the tenant's P_Key and how to log in."""
    from portal.fleet.models import TenantPartition

    gpus: dict[str, list[dict[str, Any]]] = defaultdict(list)
    seen: set[int] = set()
    for row in (Allocation.objects.filter(lease=lease).select_related("gpu", "node")
                .order_by("node__hostname", "gpu__index")):
        if row.gpu_id in seen:
            continue
        seen.add(row.gpu_id)
        gpus[row.node.hostname].append({"index": row.gpu.index, "uuid": row.gpu.uuid,
                                        "model": row.gpu.model, "health": row.gpu.health})
    partition = TenantPartition.objects.filter(tenant=lease.tenant, state="active").first()
    account = f"lease-{lease.pk.hex[:12]}"
    ports = defaultdict(list)
    for hostname, guid in HcaPort.objects.filter(node__hostname__in=list(gpus)).values_list(
            "node__hostname", "port_guid"):
        ports[hostname].append(guid)
    return {
        "account": account,
        "pkey": f"0x{partition.pkey | 0x8000:04x}" if partition else None,
        "nodes": [{"hostname": h, "ssh": f"ssh {account}@{h}", "gpus": g,
                   "hca_ports": sorted(ports[h])} for h, g in gpus.items()],
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
