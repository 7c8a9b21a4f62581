from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from portal.webhooks.catalogue import EVENT_TYPES
from portal.webhooks.models import ALL_EVENTS

EVENT_CHOICES = [(ALL_EVENTS, _("All events")), *[(e, e) for e in EVENT_TYPES]]


class EventsForm(forms.Form):
    events = forms.MultipleChoiceField(label=_("Events"), choices=EVENT_CHOICES,
                                       widget=forms.CheckboxSelectMultiple)


class EndpointForm(EventsForm):
    url = forms.URLField(label=_("Receiver URL"), max_length=500, assume_scheme="https")
    description = forms.CharField(label=_("Description"), max_length=200, required=False)
    field_order = ["url", "description", "events"]
