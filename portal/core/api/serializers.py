"""Strict input for the whole API: a body field the endpoint does not know is refused.

DRF ignores unknown fields; a client that misspells a field, or sends one this portal does
not have yet (``"mig_profile": "1g.10gb"`` on an order), would silently get something else
than it asked for (a whole GPU). Every input serializer of ``portal/*/api`` derives from
``StrictSerializer``: each unknown (or read-only) key comes back as a 400 naming it, in the
API's one error body (``portal/core/api/errors.py``), next to any other field error.
The agent API (``portal/fleet``) is not DRF and stays additive-tolerant (its protocol's rule:
receivers ignore unknown fields, docs/agent-protocol.md §1).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop
from rest_framework import serializers

UNKNOWN_FIELD = gettext_noop("Unknown field.")
READ_ONLY_FIELD = gettext_noop("Read-only field.")
# Transport, not input: the CSRF token an HTML form (the browsable API's) posts along.
FORM_TRANSPORT = frozenset({"csrfmiddlewaretoken"})


def _writable(fields: Mapping[str, Any]) -> set[str]:
    return {name for name, field in fields.items() if not field.read_only}


def unknown_field_errors(data: Any, fields: Mapping[str, Any]) -> dict[str, list[str]]:
    """The keys of ``data`` that ``fields`` does not accept, each with its reason."""
    if not isinstance(data, Mapping):
        return {}
    writable = _writable(fields)
    return {str(key): [_(READ_ONLY_FIELD) if key in fields else _(UNKNOWN_FIELD)]
            for key in sorted(map(str, data)) if key not in writable | FORM_TRANSPORT}


class StrictSerializer(serializers.Serializer[None]):
    """An input serializer that refuses the fields it does not declare."""

    def to_internal_value(self, data: Any) -> Any:
        unknown = unknown_field_errors(data, self.fields)
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if unknown and isinstance(exc.detail, dict):
                raise serializers.ValidationError({**exc.detail, **unknown}) from exc
            raise
        if unknown:
            raise serializers.ValidationError(unknown)
        return value


class EmptyBodySerializer(StrictSerializer):
    """An action that takes no input: any field sent is named and refused (400)."""
