"""Console forms: they parse and check shapes; the console services decide the rest."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django import forms
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from portal.billing.models import CreditLine
from portal.console.quotas import LIMITS
from portal.inventory.models import Fabric
from portal.web import labels


class DateTimeLocal(forms.DateTimeInput):
    input_type = "datetime-local"

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__(attrs=attrs, format="%Y-%m-%dT%H:%M")


class UtcDateTimeField(forms.DateTimeField):
    """A date and time read as UTC, whatever the active time zone."""

    widget = DateTimeLocal

    def to_python(self, value: Any) -> datetime | None:
        with timezone.override(UTC):
            return super().to_python(value)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, datetime):
            return value.astimezone(UTC).replace(tzinfo=None)
        return value


class DateInput(forms.DateInput):
    input_type = "date"

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__(attrs=attrs, format="%Y-%m-%d")


def next_hour() -> datetime:
    from portal.core import clock

    at = clock.now().astimezone(UTC)
    return at.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)


LAST_YEAR = 2999  # far enough; keeps date arithmetic (end of day, month ends) in range


def _too_late(form: forms.Form, data: dict[str, Any], *names: str) -> None:
    for name in names:
        value = data.get(name)
        if value is not None and value.year > LAST_YEAR:
            form.add_error(name, _("Must be before the year %(year)s.") % {
                "year": LAST_YEAR + 1})
            data.pop(name, None)


def day_start(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


class QuotaForm(forms.Form):
    gpu_model = forms.ChoiceField(label=_("GPU model"), required=False,
                                  help_text=_("“All models” is the tenant-wide row: it applies "
                                              "to every model without a row of its own."))
    max_gpus = forms.IntegerField(label=_("Max GPUs"), min_value=0,
                                  max_value=LIMITS["max_gpus"],
                                  help_text=_("Concurrent GPUs."))
    guaranteed_gpus = forms.IntegerField(label=_("Guaranteed GPUs"), min_value=0,
                                         max_value=LIMITS["guaranteed_gpus"], initial=0)
    gpu_hour_budget = forms.DecimalField(label=_("Monthly GPU-hour budget"), required=False,
                                         min_value=Decimal(0), max_digits=12, decimal_places=2,
                                         help_text=_("Empty: no budget."))
    max_lease_hours = forms.IntegerField(label=_("Max lease hours"), min_value=1,
                                         max_value=LIMITS["max_lease_hours"], initial=24 * 30)
    max_pending_orders = forms.IntegerField(label=_("Max waiting orders"), min_value=0,
                                            max_value=LIMITS["max_pending_orders"], initial=20)
    allow_spot = forms.BooleanField(label=_("Spot leases allowed"), required=False, initial=True)
    allow_borrowing = forms.BooleanField(label=_("Borrowing allowed"), required=False,
                                         initial=True)
    reason = forms.CharField(label=_("Reason"), required=False, max_length=300)
    confirm = forms.BooleanField(
        label=_("Apply anyway: running leases are not preempted"), required=False)

    def __init__(self, *args: Any, models: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["gpu_model"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [("", _("All models (tenant-wide)"))] + [(m, m) for m in models]

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        top, floor = data.get("max_gpus"), data.get("guaranteed_gpus")
        if top is not None and floor is not None and floor > top:
            self.add_error("guaranteed_gpus", _("Must not exceed max GPUs."))
        return data

    def values(self) -> dict[str, Any]:
        d = self.cleaned_data
        return {name: d[name] for name in (
            "gpu_model", "max_gpus", "guaranteed_gpus", "gpu_hour_budget", "max_lease_hours",
            "max_pending_orders", "allow_spot", "allow_borrowing", "reason", "confirm")}


class ContractForm(forms.Form):
    gpu_model = forms.ChoiceField(label=_("GPU model"), required=False)
    priority = forms.ChoiceField(label=_("Priority"), required=False,
                                 choices=[("", _("Any priority")),
                                          *labels.choices(labels.PRIORITIES)])
    unit_price = forms.DecimalField(label=_("Contract price per GPU-hour"), required=False,
                                    min_value=Decimal(0), max_digits=12, decimal_places=4,
                                    help_text=_("Replaces the list price."))
    discount_percent = forms.DecimalField(label=_("Discount (%)"), required=False,
                                          min_value=Decimal(0), max_value=Decimal(100),
                                          max_digits=5, decimal_places=2,
                                          help_text=_("Off the list price; or a price, "
                                                      "not both."))
    effective_from = UtcDateTimeField(label=_("Effective from (UTC, whole hour)"))
    effective_to = UtcDateTimeField(label=_("Effective until (UTC, empty: open-ended)"),
                                    required=False)
    reference = forms.CharField(label=_("Reference"), required=False, max_length=100)

    def __init__(self, *args: Any, models: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["gpu_model"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [("", _("Any model"))] + [(m, m) for m in models]
        if not self.is_bound:
            self.initial.setdefault("effective_from", next_hour())

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        _too_late(self, data, "effective_from", "effective_to")
        price, discount = data.get("unit_price"), data.get("discount_percent")
        if "unit_price" not in self.errors and "discount_percent" not in self.errors:
            if price is None and not discount:
                self.add_error("unit_price", _("Give a contract price or a discount."))
            elif price is not None and discount:
                self.add_error("discount_percent",
                               _("Give a contract price or a discount, not both."))
        start, end = data.get("effective_from"), data.get("effective_to")
        if start and end and end <= start:
            self.add_error("effective_to", _("Must be after the start."))
        return data

    def values(self) -> dict[str, Any]:
        d = self.cleaned_data
        return {"gpu_model": d["gpu_model"], "priority": d["priority"],
                "unit_price": d["unit_price"], "discount_percent": d["discount_percent"],
                "effective_from": d["effective_from"], "effective_to": d["effective_to"],
                "reference": d["reference"]}


class CreditForm(forms.Form):
    category = forms.ChoiceField(label=_("Kind"),
                                 choices=labels.choices(labels.CHOICES["credit_category"]),
                                 initial=CreditLine.Category.CREDIT)
    amount = forms.DecimalField(label=_("Amount"), max_digits=14, decimal_places=2,
                                help_text=_("A credit is negative (money back to the tenant); "
                                            "an adjustment may be either sign."))
    description = forms.CharField(label=_("Description"), max_length=300)
    period_start = forms.DateField(label=_("Period from (UTC date)"), widget=DateInput())
    period_end = forms.DateField(label=_("Period to (UTC date, inclusive)"),
                                 widget=DateInput())

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        _too_late(self, data, "period_start", "period_end")
        start, end = data.get("period_start"), data.get("period_end")
        if start and end and end < start:
            self.add_error("period_end", _("Must not be before the start."))
        amount = data.get("amount")
        if amount is not None and "amount" not in self.errors:
            if not amount:
                self.add_error("amount", _("Must not be zero."))
            elif data.get("category") == CreditLine.Category.CREDIT and amount > 0:
                self.add_error("amount", _("A credit is a negative amount."))
        return data

    def values(self) -> dict[str, Any]:
        d = self.cleaned_data
        return {"category": d["category"], "amount": d["amount"],
                "description": d["description"],
                "period_start": day_start(d["period_start"]),
                "period_end": day_start(d["period_end"]) + timedelta(days=1)}


class StorageEndpointForm(forms.Form):
    """A storage server's HCA port(s) on a fabric: a port GUID, or the node name that the
    imported ``ibnetdiscover`` output gives it (all its ports)."""

    fabric = forms.ModelChoiceField(queryset=Fabric.objects.order_by("name"),
                                    to_field_name="name", label=_("Fabric"))
    port_guid = forms.CharField(max_length=20, required=False, label=_("Port GUID"),
                                help_text=_("e.g. 0x0002c903000e0b72"))
    node_name = forms.CharField(max_length=200, required=False, label=_("Node name"),
                                help_text=_("As in ibnetdiscover, e.g. storage-01"))


def _role_choices() -> list[tuple[str, Any]]:
    return labels.choices(labels.ROLES)


class MemberInviteForm(forms.Form):
    """Invite an address into a tenant from the console (the invitee accepts by mail)."""

    email = forms.EmailField(label=_("Email address"))
    role = forms.ChoiceField(label=_("Role"), choices=_role_choices, initial="member")


class MemberRoleForm(forms.Form):
    role = forms.ChoiceField(label=_("Role"), choices=_role_choices)


def role_prefix(member: Any) -> str:
    """One role form per member row: its fields are ``role-<member id>-role``."""
    return f"role-{member.pk}"
