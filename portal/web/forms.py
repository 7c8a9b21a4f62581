"""Page forms: they parse and check shapes; the services decide everything else."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from portal.core.errors import ApplicationError
from portal.leasing import limits
from portal.leasing.models import MILLI_PER_SLOT, Locality, Priority
from portal.tenants.models import Role
from portal.tenants.sshkeys import parse_public_key
from portal.web import labels


def fractions() -> list[tuple[int, str]]:
    """Whole GPUs or eighths of one, labelled in the request's language."""
    return [(1000, gettext("Whole GPUs"))] + [
        (m, gettext("%(n)s/8 of one GPU") % {"n": m // MILLI_PER_SLOT})
        for m in range(875, 0, -MILLI_PER_SLOT)]


class DateTimeLocal(forms.DateTimeInput):
    input_type = "datetime-local"

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__(attrs=attrs, format="%Y-%m-%dT%H:%M")


class SshKeyForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=100,
                           help_text=_("For example: laptop, CI runner."))
    public_key = forms.CharField(
        label=_("Public key"), max_length=16384,
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false",
                                     "placeholder": "ssh-ed25519 AAAA… you@host"}),
        help_text=_("One OpenSSH public key line: ed25519, ECDSA or RSA (2048 bits or more)."))

    def clean_public_key(self) -> str:
        text = self.cleaned_data["public_key"]
        try:
            parse_public_key(text)
        except ApplicationError as exc:
            raise ValidationError(exc.message) from exc
        return text


class OrderForm(forms.Form):
    models = forms.MultipleChoiceField(
        label=_("GPU model"), widget=forms.CheckboxSelectMultiple,
        help_text=_("Pick one or more acceptable models."))
    gpu_count = forms.IntegerField(label=_("GPUs per node"), min_value=1,
                                   max_value=limits.MAX_MIG_INSTANCES_PER_NODE, initial=8)
    gpu_milli = forms.TypedChoiceField(label=_("Share of a GPU"), choices=fractions,
                                       coerce=int, initial=1000,
                                       help_text=_("Only with one GPU on one node."))
    mig_profile = forms.ChoiceField(
        label=_("MIG instance"), required=False, initial="",
        help_text=_("An isolated slice of one GPU (MIG); GPUs per node then counts instances, "
                    "all on one node."))
    nodes = forms.IntegerField(label=_("Nodes"), min_value=1, max_value=limits.MAX_NODES, initial=1,
                               help_text=_("Gang size: all nodes start together."))
    locality = forms.ChoiceField(label=_("Locality"), choices=labels.choices(labels.LOCALITIES),
                                 initial=Locality.ANY)
    locality_required = forms.BooleanField(label=_("Locality is required"), required=False)
    priority = forms.ChoiceField(label=_("Priority"), choices=labels.choices(labels.PRIORITIES),
                                 initial=Priority.ON_DEMAND)
    start = forms.ChoiceField(label=_("Start"), widget=forms.RadioSelect, initial="now",
                              choices=[("now", _("As soon as possible")),
                                       ("later", _("At a chosen time"))])
    start_at = forms.DateTimeField(label=_("Start at (UTC)"), required=False,
                                   widget=DateTimeLocal())
    duration_hours = forms.DecimalField(label=_("Duration (hours)"), min_value=Decimal("0.25"),
                                        max_value=Decimal(limits.MAX_DURATION_HOURS),
                                        decimal_places=2,
                                        initial=Decimal(4))
    name = forms.CharField(label=_("Name"), required=False, max_length=100)
    idempotency_key = forms.CharField(widget=forms.HiddenInput, max_length=64)

    def __init__(self, *args: Any, model_choices: list[str],
                 mig_choices: list[dict[str, Any]] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["models"].choices = [(m, m) for m in model_choices]
        self.fields["mig_profile"].choices = [("", _("No: whole GPUs or a share"))] + [
            (o["profile"], _("%(profile)s (%(free)s free now)")
             % {"profile": o["profile"], "free": o["free_now"]}) for o in mig_choices or []]
        if not self.is_bound:
            self.initial.setdefault("idempotency_key", uuid.uuid4().hex)
            if model_choices:
                self.initial.setdefault("models", [model_choices[0]])

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("start") == "later" and not data.get("start_at"):
            self.add_error("start_at", _("Give a start time, or choose to start now."))
        milli = data.get("gpu_milli")
        if data.get("mig_profile"):
            return data  # the order service checks a MIG order's shape (field-named)
        count = data.get("gpu_count")
        if count and count > limits.MAX_GPUS_PER_NODE:
            self.add_error("gpu_count", _("Between 1 and %(max)s GPUs per node.")
                           % {"max": limits.MAX_GPUS_PER_NODE})
        if milli and milli < 1000 and (data.get("gpu_count") != 1 or data.get("nodes") != 1):
            self.add_error("gpu_milli", _("A share of a GPU is for one GPU on one node."))
        return data

    def spec_values(self) -> dict[str, Any]:
        d = self.cleaned_data
        return {
            "models": list(d["models"]), "gpu_count": d["gpu_count"],
            "gpu_milli": d["gpu_milli"], "mig_profile": d.get("mig_profile") or "",
            "nodes": d["nodes"], "locality": d["locality"],
            "locality_required": d["locality_required"], "priority": d["priority"],
            "start_at": d["start_at"] if d["start"] == "later" else None,
            "duration_hours": d["duration_hours"], "end_at": None, "name": d["name"],
            "tags": {},
        }


class ExtendForm(forms.Form):
    end_at = forms.DateTimeField(label=_("New end (UTC)"), widget=DateTimeLocal())


class ReasonForm(forms.Form):
    reason = forms.CharField(label=_("Reason (optional)"), required=False, max_length=300)
    confirm = forms.BooleanField(label=_("Yes, I am sure"))


class LeaseFilterForm(forms.Form):
    state = forms.ChoiceField(label=_("State"), required=False,
                              choices=[("", _("Any state")), ("live", _("Current and upcoming")),
                                       *labels.choices(labels.STATES)])
    model = forms.CharField(label=_("GPU model"), required=False, max_length=32)
    since = forms.DateField(label=_("From"), required=False,
                            widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(label=_("Until"), required=False,
                            widget=forms.DateInput(attrs={"type": "date"}))

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("since") and data.get("until") and data["until"] < data["since"]:
            self.add_error("until", _("The end date is before the start date."))
        return data


ROLE_CHOICES = labels.choices(labels.ROLES)


class InviteForm(forms.Form):
    email = forms.EmailField(label=_("Email address"))
    role = forms.ChoiceField(label=_("Role"), choices=ROLE_CHOICES, initial=Role.MEMBER)


class RoleForm(forms.Form):
    role = forms.ChoiceField(label=_("Role"), choices=ROLE_CHOICES)


class MemberLimitForm(forms.Form):
    max_gpus = forms.IntegerField(
        label=_("Personal GPU limit"), required=False, min_value=0,
        widget=forms.NumberInput(attrs={"min": 0, "step": 1, "style": "width:6rem"}))


class ApiKeyForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=100)
    expires_at = forms.DateTimeField(label=_("Expires (UTC, optional)"), required=False,
                                     widget=DateTimeLocal())


class TenantSwitchForm(forms.Form):
    tenant = forms.SlugField(label=_("Tenant"))
    next = forms.CharField(required=False)
