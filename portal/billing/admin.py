"""Billing in the Django admin: the price book is editable; metered data is read-only
(usage, credits and invoices change only through the billing services, which audit)."""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from portal.billing.models import (
    BudgetAlert,
    CreditLine,
    Invoice,
    Price,
    TenantContract,
    UsageRecord,
)


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Price)
class PriceAdmin(ReadOnlyAdmin):
    """Prices are added through the console's services (never retroactive)."""

    list_display = ("gpu_model", "mig_profile", "priority", "unit_price", "currency",
                    "effective_from")
    list_filter = ("gpu_model", "mig_profile", "priority", "currency")


@admin.register(TenantContract)
class TenantContractAdmin(ReadOnlyAdmin):
    list_display = ("tenant", "gpu_model", "priority", "unit_price", "discount_percent",
                    "effective_from", "effective_to", "reference")
    list_filter = ("tenant",)


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnlyAdmin):
    list_display = ("lease", "tenant", "period_start", "seconds", "gpus", "gpu_model",
                    "unit_price", "cost", "currency", "closed", "gpu_util_avg")
    list_filter = ("closed", "gpu_model", "priority", "tenant")
    date_hierarchy = "period_start"
    list_select_related = ("lease", "tenant")


@admin.register(CreditLine)
class CreditLineAdmin(ReadOnlyAdmin):
    list_display = ("tenant", "month", "category", "kind", "amount", "currency", "description")
    list_filter = ("category", "kind", "tenant")


@admin.register(Invoice)
class InvoiceAdmin(ReadOnlyAdmin):
    list_display = ("tenant", "month", "status", "usage_total", "credit_total", "total",
                    "currency", "line_count", "finalized_at")
    list_filter = ("status", "currency", "tenant")


@admin.register(BudgetAlert)
class BudgetAlertAdmin(ReadOnlyAdmin):
    list_display = ("tenant", "month", "threshold", "used_gpu_hours", "budget_gpu_hours",
                    "created")
    list_filter = ("threshold", "tenant")
