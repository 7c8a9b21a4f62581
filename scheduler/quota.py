"""Quota admission: guaranteed GPUs per model, a borrowing limit, a GPU-hour budget.

Amounts are tracked in milli-GPU. A tenant without a :class:`TenantQuota` has no
guarantee, may borrow idle capacity without limit and has no budget.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from scheduler.decisions import Reason
from scheduler.model import MILLI, Lease, Request, TenantQuota


@dataclass(frozen=True)
class Admission:
    models: frozenset[str]  # models the request may use (empty: none allowed)
    guaranteed: frozenset[str]  # of those, where it stays within the guarantee
    reason: Reason | None = None


class QuotaLedger:
    """Milli-GPU held per (tenant, model), updated as a pass places leases."""

    def __init__(self, leases: Iterable[Lease]) -> None:
        self.used: dict[tuple[str, str], int] = {}
        for lease in leases:
            self.add(lease.tenant, lease.model, lease.milli)

    @classmethod
    def of(cls, used: dict[tuple[str, str], int]) -> QuotaLedger:
        """A ledger holding ``used`` (taken, not copied)."""
        ledger = cls(())
        ledger.used = used
        return ledger

    def add(self, tenant: str, model: str, milli: int) -> None:
        self.used[(tenant, model)] = self.used.get((tenant, model), 0) + milli

    def borrowed(self, quota: TenantQuota) -> int:
        total = 0
        for (tenant, model), milli in self.used.items():
            if tenant == quota.tenant:
                total += max(0, milli - quota.guaranteed.get(model, 0) * MILLI)
        return total

    def admit(self, request: Request, quota: TenantQuota | None,
              cluster_models: Iterable[str]) -> Admission:
        models = frozenset(request.models or cluster_models)
        if quota is None:
            return Admission(models, frozenset())
        if not _within_budget(request, quota):
            return Admission(frozenset(), frozenset(), Reason.BUDGET)
        need = request.total_milli
        borrowed = self.borrowed(quota)
        allowed: set[str] = set()
        guaranteed: set[str] = set()
        for m in models:
            room = quota.guaranteed.get(m, 0) * MILLI - self.used.get((quota.tenant, m), 0)
            if need <= room:
                allowed.add(m)
                guaranteed.add(m)
            elif quota.borrow_limit is None or (
                borrowed + need - max(0, room) <= quota.borrow_limit * MILLI
            ):
                allowed.add(m)
        reason = None if allowed else Reason.QUOTA
        return Admission(frozenset(allowed), frozenset(guaranteed), reason)


def _within_budget(request: Request, quota: TenantQuota) -> bool:
    if quota.gpu_hour_budget is None:
        return True
    if request.duration is None:
        return quota.gpu_hours_used < quota.gpu_hour_budget
    cost = request.gpu_count * request.duration / 3600
    return quota.gpu_hours_used + cost <= quota.gpu_hour_budget + 1e-9
