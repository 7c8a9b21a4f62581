"""Reads for the console (staff see every tenant)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Count, Q, QuerySet

from portal.billing import selectors as billing
from portal.billing.models import CreditLine, Price, TenantContract
from portal.console import fabricmap
from portal.core import clock
from portal.core.models import AuditLog
from portal.inventory.models import Gpu, Node, Switch, SwitchLink
from portal.leasing import states
from portal.leasing.models import SLOTS_PER_GPU, Allocation, Lease, Quota
from portal.leasing.quotas import gpu_hours_used, month_bounds, quota_hours_used
from portal.tenants.models import Tenant

LIVE = sorted(states.HOLDING)
WAITING = sorted(states.WAITING)
COLOURS = {"ready": "#2e7d32", "draining": "#f9a825", "drained": "#8d6e63",
           "down": "#c62828", "maintenance": "#6a1b9a"}


def fabric_map() -> fabricmap.Layout:
    """Switches and nodes laid out in leaf columns for the console's SVG
    (``portal.console.fabricmap``)."""
    from django.utils.translation import gettext as _

    links: dict[int, int] = {}
    for a, b in SwitchLink.objects.values_list("a_id", "b_id"):
        links[a] = links.get(a, 0) + 1
        links[b] = links.get(b, 0) + 1
    switches = list(Switch.objects.order_by("description", "guid"))
    upper = [fabricmap.SwitchIn(sw.pk, sw.description or sw.guid, links.get(sw.pk, 0))
             for sw in switches if sw.role != Switch.Role.LEAF]
    leaves = [fabricmap.SwitchIn(sw.pk, sw.description or sw.guid, links.get(sw.pk, 0))
              for sw in switches if sw.role == Switch.Role.LEAF]
    nodes = [fabricmap.NodeIn(hostname=n.hostname, leaf=n.leaf_id, state=n.state,
                              colour=COLOURS.get(n.state, "#607d8b"), allocated=n.held,
                              gpus=n.gpus_total)
             for n in Node.objects.annotate(
                 held=Count("allocations__gpu", filter=Q(allocations__live=True),
                            distinct=True),
                 gpus_total=Count("gpus", distinct=True)).order_by("hostname")]
    return fabricmap.layout(upper, leaves, nodes, no_leaf=_("No leaf switch"))


def affected_leases(node: Node) -> QuerySet[Lease]:
    """Leases that hold (or are about to hold) GPUs on ``node``."""
    ids = Allocation.objects.filter(node=node, live=True).values("lease_id")
    return Lease.objects.filter(pk__in=ids, state__in=LIVE).select_related("tenant")


def queue() -> QuerySet[Lease]:
    return (Lease.objects.filter(state__in=WAITING).select_related("tenant")
            .order_by("-queue_boost", "created"))


def partitions() -> list[dict[str, Any]]:
    from portal.fleet.models import NodeDesiredState, NodeObservedState, TenantPartition

    desired = {d.node_id: d for d in NodeDesiredState.objects.select_related("node")}
    observed = {o.node_id: o for o in NodeObservedState.objects.all()}
    rows = []
    for part in TenantPartition.objects.select_related("tenant").order_by("pkey"):
        ports = []
        for node_id, d in desired.items():
            members = [p for p in (d.document or {}).get("partitions", [])
                       if isinstance(p, dict) and p.get("pkey") in (part.pkey, part.pkey_hex)]
            if not members:
                continue
            obs = observed.get(node_id)
            in_sync = bool(obs and obs.partitions_in_sync
                           and obs.generation_applied >= d.generation)
            ports.append({"node": d.node.hostname, "ports": members, "in_sync": in_sync})
        rows.append({"partition": part, "ports": ports,
                     "drift": any(not p["in_sync"] for p in ports)})
    return rows


def audit_entries(*, action: str = "", actor: str = "", tenant: str = "",
                  object_type: str = "") -> QuerySet[AuditLog]:
    qs = AuditLog.objects.select_related("tenant")
    if action:
        qs = qs.filter(action__icontains=action)
    if actor:
        qs = qs.filter(actor_repr__icontains=actor)
    if tenant:
        qs = qs.filter(tenant__slug=tenant)
    if object_type:
        qs = qs.filter(object_type=object_type)
    return qs


def gpu_models() -> list[str]:
    """GPU models present in the inventory, sorted."""
    return sorted(m for m in Gpu.objects.values_list("model", flat=True).distinct().order_by()
                  if m)


def price_models(inventory: list[str] | None = None) -> list[str]:
    """GPU models a contract may name: the inventory's and the price book's."""
    book = Price.objects.exclude(gpu_model="").values_list("gpu_model", flat=True).distinct()
    return sorted(set(gpu_models() if inventory is None else inventory)
                  | set(book.order_by()))


def gpus_in_use(tenant: Tenant, at: datetime | None = None) -> dict[str, Decimal]:
    """Whole-GPU equivalents the tenant holds right now, per GPU model (one query)."""
    at = at or clock.now()
    rows = (Allocation.objects.filter(live=True, lease__tenant=tenant, start_at__lte=at,
                                      end_at__gt=at)
            .values("gpu__model").annotate(slots=Count("id")).order_by())
    return {r["gpu__model"]: Decimal(r["slots"]) / SLOTS_PER_GPU for r in rows}


def quota_in_use(gpu_model: str, held: dict[str, Decimal], own_rows: set[str]) -> Decimal:
    """GPUs in use that count against the quota row of ``gpu_model``.

    A model's row counts that model; the tenant-wide row ('') limits every model without
    its own row, each on its own (see ``portal.leasing.quotas.quota_for``), so the largest
    of those is what the row must accommodate.
    """
    if gpu_model:
        return held.get(gpu_model, Decimal(0))
    return max((v for m, v in held.items() if m not in own_rows), default=Decimal(0))


def gpu_hours_this_month(tenant: Tenant, quota: Quota | None = None) -> Decimal:
    """GPU-hours of the month counted against a budget (metered plus committed): the quota
    row's own (see ``portal.leasing.quotas.quota_hours_used``), or without a row the
    tenant's total over every model."""
    now = clock.now()
    if quota is not None:
        return quota_hours_used(tenant, quota, now).total.quantize(Decimal("0.01"))
    start, end = month_bounds(now)
    models = set(Allocation.objects.filter(lease__tenant=tenant)
                 .values_list("gpu__model", flat=True).distinct())
    models |= {m for row in Lease.objects.filter(tenant=tenant, start_at__lt=end,
                                                    end_at__gt=start)
               .values_list("allowed_models", flat=True) for m in row}
    total = sum((gpu_hours_used(tenant, m, start, end, now).total for m in sorted(models)),
                Decimal(0))
    return total.quantize(Decimal("0.01"))


def tenant_detail(tenant: Tenant) -> dict[str, Any]:
    """Everything the console's tenant page shows, in a bounded number of queries."""
    quotas = list(Quota.objects.filter(tenant=tenant).order_by("gpu_model"))
    held = gpus_in_use(tenant)
    own = {q.gpu_model for q in quotas if q.gpu_model}
    month = billing.current_month()
    return {
        "quotas": [{"quota": q, "in_use": quota_in_use(q.gpu_model, held, own)}
                   for q in quotas],
        "held": sorted(held.items()),
        "month": month,
        "budget": billing.budget_usage(tenant=tenant, month=month),
        "committed_hours": gpu_hours_this_month(tenant),
        "contracts": list(TenantContract.objects.filter(tenant=tenant)
                          .order_by("-effective_from", "-id")[:50]),
        "credits": list(CreditLine.objects.filter(tenant=tenant)
                        .select_related("created_by").order_by("-id")[:20]),
        "invoices": list(billing.invoices(tenant=tenant)[:12]),
    }


def tenant_members(tenant: Tenant) -> dict[str, Any]:
    """The tenant's members (by user name) and its open invitations, for the console."""
    from django.utils import timezone

    from portal.tenants.models import Invitation, Membership

    return {
        "members": list(Membership.objects.filter(tenant=tenant).select_related("user")
                        .order_by("user__username")[:500]),
        "invitations": list(Invitation.objects.filter(
            tenant=tenant, accepted_at__isnull=True, revoked_at__isnull=True,
            expires_at__gt=timezone.now()).select_related("inviter").order_by("email")[:200]),
    }
