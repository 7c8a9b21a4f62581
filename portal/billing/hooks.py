"""What the billing app announces (portal/core/hooks.py): a tenant crossed a budget
threshold. ``budget_alert`` carries one :class:`BudgetNews` after the BudgetAlert row
commits (once per tenant, month and threshold); outbound channels (webhooks) connect."""

from __future__ import annotations

from dataclasses import dataclass

from portal.core.hooks import Hook


@dataclass(frozen=True)
class BudgetNews:
    event: str  # "budget.alert"
    tenant_id: str
    alert_id: str
    month: str  # "YYYY-MM"
    threshold: int  # percent
    used_gpu_hours: str  # Decimal as text
    budget_gpu_hours: str


budget_alert: Hook[BudgetNews] = Hook("billing.budget_alert")
