"""Tenant InfiniBand partitions: one unique 15-bit P_Key per tenant, quarantined on release.

Invariants (database): a P_Key appears in at most one row; a tenant has at most one active
partition; keys are 15-bit. Allocation races lose on those constraints and retry.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from portal.core import clock
from portal.core.errors import Conflict
from portal.core.services import audit_record
from portal.fleet.models import PortTelemetry, TenantPartition
from portal.tenants.models import Tenant

DEFAULT_RANGE = (0x0100, 0x7FFE)
DEFAULT_QUARANTINE_HOURS = 24
ATTEMPTS = 8


def pkey_range() -> tuple[int, int]:
    lo, hi = getattr(settings, "GPUPOOL_PKEY_RANGE", DEFAULT_RANGE)
    return max(int(lo), 0x0001), min(int(hi), 0x7FFE)


def quarantine() -> timedelta:
    return timedelta(hours=getattr(settings, "GPUPOOL_PKEY_QUARANTINE_HOURS",
                                   DEFAULT_QUARANTINE_HOURS))


def held_pkeys() -> set[int]:
    """15-bit keys present in any port's last reported P_Key table."""
    held: set[int] = set()
    for pkeys in PortTelemetry.objects.values_list("data__pkeys", flat=True):
        for text in pkeys or []:
            try:
                held.add(int(text, 16) & 0x7FFF)
            except (TypeError, ValueError):
                continue
    return held


def partition_for_tenant(*, tenant: Tenant) -> TenantPartition:
    """The tenant's active partition, allocated on first use (race-safe)."""
    for _ in range(ATTEMPTS):
        existing = TenantPartition.objects.filter(
            tenant=tenant, state=TenantPartition.State.ACTIVE).first()
        if existing is not None:
            return existing
        try:
            return _allocate(tenant)
        except IntegrityError:
            continue  # another transaction took the key (or the tenant's slot): look again
    raise Conflict("Could not allocate a partition key; try again.", code="pkey_contention")


@transaction.atomic
def _allocate(tenant: Tenant) -> TenantPartition:
    lo, hi = pkey_range()
    held = held_pkeys()
    taken = set(TenantPartition.objects.filter(pkey__gte=lo, pkey__lte=hi)
                .values_list("pkey", flat=True))
    fresh = next((k for k in range(lo, hi + 1) if k not in taken and k not in held), None)
    if fresh is None:
        fresh = _recyclable(held)
    if fresh is None:
        raise Conflict("No free partition key in the configured range.", code="pkey_exhausted")
    partition = TenantPartition.objects.create(tenant=tenant, pkey=fresh)
    audit_record(actor=None, action="fleet.partition_allocate", obj=partition,
                 changes={"pkey": partition.pkey_hex})
    return partition


def _recyclable(held: set[int]) -> int | None:
    """The longest-quarantined key past its quarantine and held by no port: its old row is
    deleted (the audit log keeps the history) so the key can be allocated again."""
    lo, hi = pkey_range()
    cutoff = clock.now() - quarantine()
    candidates = (TenantPartition.objects.select_for_update(skip_locked=True)
                  .filter(state=TenantPartition.State.QUARANTINED, released_at__lte=cutoff,
                          pkey__gte=lo, pkey__lte=hi).order_by("released_at"))
    for old in candidates:
        if old.pkey in held:
            continue
        pkey = old.pkey
        audit_record(actor=None, action="fleet.partition_recycle", obj=old, tenant=old.tenant,
                     changes={"pkey": old.pkey_hex})
        old.delete()
        return int(pkey)
    return None


@transaction.atomic
def partition_release(*, tenant: Tenant) -> TenantPartition | None:
    """Quarantine the tenant's active key; it is not reused before the quarantine ends."""
    partition = (TenantPartition.objects.select_for_update()
                 .filter(tenant=tenant, state=TenantPartition.State.ACTIVE).first())
    if partition is None:
        return None
    partition.state = TenantPartition.State.QUARANTINED
    partition.released_at = clock.now()
    partition.save(update_fields=["state", "released_at"])
    audit_record(actor=None, action="fleet.partition_release", obj=partition,
                 changes={"pkey": partition.pkey_hex})
    return partition


def partition_map_entry(*, tenant: Tenant, name: str, full: set[str], index0: set[str],
                        storage: set[str]) -> dict[str, Any]:
    """The tenant's partition for the fabric manager: its ports full members, those in
    ``index0`` with the key at P_Key index 0 (what NCCL/UCX use unless told otherwise), and
    every storage port a *limited* member, so tenants reach storage but storage joins no
    two tenants (ADR 0107)."""
    partition = partition_for_tenant(tenant=tenant)
    members = [{"guid": g, "membership": "full", "index0": g in index0} for g in sorted(full)]
    members += [{"guid": g, "membership": "limited", "index0": False}
                for g in sorted(storage - full)]
    return {"name": name, "pkey": f"0x{partition.pkey:04x}", "ipoib": True, "members": members}


def index0_owners(rows: list[tuple[Any, str, Any]]) -> dict[str, Any]:
    """Port GUID -> the tenant whose key goes to index 0 of that port: the tenant of the
    first live lease on it (rows: tenant id, GUID, an order key such as (start, created,
    lease id)); a port shared by two tenants has one index 0."""
    owners: dict[str, tuple[Any, Any]] = {}
    for tenant_id, guid, order in rows:
        if guid not in owners or order < owners[guid][0]:
            owners[guid] = (order, tenant_id)
    return {guid: tenant_id for guid, (_, tenant_id) in owners.items()}
