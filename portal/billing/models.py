"""Price book, metered usage, credits, invoices and budget alerts (docs/billing.md)."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from portal.leasing.models import Lease, Priority
from portal.tenants.models import Tenant

MONEY = {"max_digits": 14, "decimal_places": 2}
UNIT_PRICE = {"max_digits": 12, "decimal_places": 4}


class Price(models.Model):
    """List price per GPU-hour for a GPU model ('' = any model) and priority class; with a
    ``mig_profile``, the price per instance-hour of that MIG profile of the model, which
    overrides the one derived from its slice share (ADR 0222, 0233).

    Rows are effective-dated: a row applies from ``effective_from`` (on an hour boundary)
    until the next row for the same key. Rows are never edited, only added for the future.
    """

    gpu_model = models.CharField(max_length=32, blank=True, default="")
    mig_profile = models.CharField(
        max_length=16, blank=True, default="", db_default="",
        help_text="a MIG profile of the model (1g.10gb …): the price per instance-hour; "
                  "empty: per GPU-hour")
    priority = models.CharField(max_length=16, choices=Priority.choices)
    currency = models.CharField(max_length=3, default="USD")
    unit_price = models.DecimalField(**UNIT_PRICE, help_text="per GPU-hour (per instance-hour "
                                                             "with a MIG profile)")
    effective_from = models.DateTimeField()
    created = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL,
                                   null=True, blank=True, related_name="+")

    class Meta:
        ordering = ["currency", "gpu_model", "mig_profile", "priority", "effective_from"]
        constraints = [
            models.UniqueConstraint(fields=["gpu_model", "mig_profile", "priority", "currency",
                                            "effective_from"], name="price_unique_key_date"),
            models.CheckConstraint(condition=Q(mig_profile="") | ~Q(gpu_model=""),
                                   name="price_mig_profile_has_model"),
            models.CheckConstraint(condition=Q(unit_price__gte=0), name="price_not_negative"),
        ]

    def __str__(self) -> str:
        what = f"{self.gpu_model} {self.mig_profile}" if self.mig_profile else \
            self.gpu_model or "*"
        return f"{what} {self.priority} {self.unit_price} {self.currency}"


class TenantContract(models.Model):
    """A tenant's contract price (``unit_price``) or discount on the list price."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="contracts")
    gpu_model = models.CharField(max_length=32, blank=True, default="")
    priority = models.CharField(max_length=16, choices=Priority.choices, blank=True, default="")
    unit_price = models.DecimalField(**UNIT_PRICE, null=True, blank=True)
    discount_percent = models.DecimalField(max_digits=5, decimal_places=2, default=0)
    effective_from = models.DateTimeField()
    effective_to = models.DateTimeField(null=True, blank=True)
    reference = models.CharField(max_length=100, blank=True)
    availability_sla = models.DecimalField(
        max_digits=6, decimal_places=3, null=True, blank=True,
        help_text="monthly availability promised, percent (e.g. 99.5); empty: no SLA")
    sla_credit_tiers = models.JSONField(
        default=list, blank=True, db_default=[],
        help_text='[[below_percent, credit_percent], ...], e.g. [[99.5, 10], [99, 25], '
                  '[95, 100]]: availability below 99.5 % credits 10 % of the month\'s usage')
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant", "effective_from"]
        constraints = [
            models.CheckConstraint(condition=Q(discount_percent__gte=0)
                                   & Q(discount_percent__lte=100), name="contract_discount"),
            models.CheckConstraint(condition=Q(effective_to__isnull=True)
                                   | Q(effective_to__gt=F("effective_from")),
                                   name="contract_period"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant} {self.gpu_model or '*'} {self.priority or '*'}"


class UsageRecord(models.Model):
    """One lease's usage in one charge period (an hour): per-second, rated, rounded."""

    id = models.BigAutoField(primary_key=True)
    lease = models.ForeignKey(Lease, on_delete=models.PROTECT, related_name="usage_records")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="usage_records")
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    used_from = models.DateTimeField()
    used_to = models.DateTimeField()
    seconds = models.PositiveIntegerField()
    gpus = models.DecimalField(max_digits=10, decimal_places=3)
    failed_gpu_seconds = models.DecimalField(
        max_digits=16, decimal_places=3, default=0, db_default=0,
        help_text="GPU-seconds of the period on failed hardware: not billed (ADR 0220)")
    gpu_model = models.CharField(max_length=32, blank=True)
    priority = models.CharField(max_length=16, choices=Priority.choices)
    currency = models.CharField(max_length=3)
    list_unit_price = models.DecimalField(**UNIT_PRICE)
    unit_price = models.DecimalField(**UNIT_PRICE)
    list_cost = models.DecimalField(**MONEY)
    cost = models.DecimalField(**MONEY)
    closed = models.BooleanField(default=False)
    gpu_util_avg = models.DecimalField(
        max_digits=5, decimal_places=2, null=True, blank=True,
        help_text="mean GPU utilisation (%) of the lease's GPUs in this period, from agent "
                  "telemetry samples; empty without samples")
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["period_start", "id"]
        indexes = [models.Index(fields=["tenant", "period_start"]),
                   models.Index(fields=["period_start"])]
        constraints = [
            models.UniqueConstraint(fields=["lease", "period_start"], name="usage_one_per_period"),
            models.CheckConstraint(condition=Q(period_end__gt=F("period_start")),
                                   name="usage_period"),
            models.CheckConstraint(condition=Q(failed_gpu_seconds__gte=0)
                                   & Q(failed_gpu_seconds__lte=F("gpus") * F("seconds")),
                                   name="usage_failed_within_used"),
            models.CheckConstraint(condition=Q(used_from__gte=F("period_start"))
                                   & Q(used_to__lte=F("period_end"))
                                   & Q(used_to__gte=F("used_from")), name="usage_within_period"),
        ]

    def __str__(self) -> str:
        return f"{self.lease_id} {self.period_start:%Y-%m-%d %H:00} {self.seconds}s"

    @property
    def billed_gpu_seconds(self) -> Decimal:
        return self.gpus * self.seconds - self.failed_gpu_seconds

    @property
    def gpu_hours(self) -> Decimal:
        return (self.billed_gpu_seconds / Decimal(3600)).quantize(Decimal("0.000001"))


class CreditLine(models.Model):
    """A credit or adjustment on a month's invoice (negative = money back to the tenant)."""

    class Category(models.TextChoices):
        CREDIT = "Credit", "Credit"
        ADJUSTMENT = "Adjustment", "Adjustment"

    class Kind(models.TextChoices):
        FAILURE = "failure", "Platform failure"
        SLA = "sla", "Availability SLA"
        MANUAL = "manual", "Manual"

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="credit_lines")
    lease = models.ForeignKey(Lease, on_delete=models.PROTECT, null=True, blank=True,
                              related_name="credit_lines")
    month = models.DateField(help_text="first day of the invoice month it lands on")
    source_month = models.DateField(help_text="first day of the usage month it corrects")
    category = models.CharField(max_length=16, choices=Category.choices)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.MANUAL)
    amount = models.DecimalField(**MONEY)
    currency = models.CharField(max_length=3)
    description = models.CharField(max_length=300)
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    created = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL,
                                   null=True, blank=True, related_name="+")

    class Meta:
        ordering = ["month", "id"]
        constraints = [
            models.UniqueConstraint(fields=["lease", "source_month"],
                                    condition=Q(kind="failure"), name="credit_one_failure"),
            models.UniqueConstraint(fields=["tenant", "source_month"],
                                    condition=Q(kind="sla"), name="credit_one_sla_per_month"),
            models.CheckConstraint(condition=Q(period_end__gt=F("period_start")),
                                   name="credit_period"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant} {self.month:%Y-%m} {self.amount}"


class Invoice(models.Model):
    class Status(models.TextChoices):
        DRAFT = "draft", "Draft"
        FINAL = "final", "Final"

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="invoices")
    month = models.DateField(help_text="first day of the calendar month (UTC)")
    currency = models.CharField(max_length=3)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.DRAFT)
    usage_total = models.DecimalField(**MONEY, default=0)
    credit_total = models.DecimalField(**MONEY, default=0)
    total = models.DecimalField(**MONEY, default=0)
    line_count = models.PositiveIntegerField(default=0)
    finalized_at = models.DateTimeField(null=True, blank=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-month", "tenant"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "month"], name="invoice_one_per_month"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant} {self.month:%Y-%m} {self.status} {self.total}"


class BudgetAlert(models.Model):
    """A tenant crossed ``threshold`` percent of its monthly GPU-hour budget."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="budget_alerts")
    month = models.DateField()
    threshold = models.PositiveSmallIntegerField()
    used_gpu_hours = models.DecimalField(max_digits=14, decimal_places=3)
    budget_gpu_hours = models.DecimalField(max_digits=12, decimal_places=2)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "month", "threshold"],
                                    name="budget_alert_once"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant} {self.month:%Y-%m} ≥{self.threshold}%"
