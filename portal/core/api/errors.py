"""One error body for the whole API.

``{"error": <code>, "detail": <message>, "fields": {<field>: [<message>, ...]}}``
Field errors always name the field (``non_field_errors`` for cross-field rules). A refusal
that left a record says which (``"lease_id"`` of a refused order, kept as REJECTED).
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from django.utils.translation import gettext as _
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from portal.core.errors import ApplicationError

log = logging.getLogger(__name__)


def _flatten(detail: Any) -> dict[str, list[str]]:
    if isinstance(detail, dict):
        out: dict[str, list[str]] = {}
        for key, value in detail.items():
            if isinstance(value, dict):
                for sub, msgs in _flatten(value).items():
                    out[f"{key}.{sub}"] = msgs
            elif isinstance(value, list):
                out[str(key)] = [str(v) for v in value]
            else:
                out[str(key)] = [str(value)]
        return out
    if isinstance(detail, list):
        return {"non_field_errors": [str(v) for v in detail]}
    return {}


def error_body(code: str, detail: str,
               fields: dict[str, list[str]] | None = None) -> dict[str, Any]:
    return {"error": code, "detail": detail, "fields": fields or {}}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ApplicationError):
        return Response({**error_body(exc.code, exc.message, exc.fields), **exc.refs},
                        status=exc.status_code)
    if isinstance(exc, DjangoValidationError):
        fields = exc.message_dict if hasattr(exc, "error_dict") else {
            "non_field_errors": exc.messages}
        return Response(error_body("invalid", _("Invalid input."), fields),
                        status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        response.data = error_body("invalid", _("Invalid input."), _flatten(exc.detail))
    elif isinstance(exc, exceptions.APIException):
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        code = exc.get_codes() if isinstance(exc.get_codes(), str) else exc.default_code
        response.data = error_body(str(code), str(detail))
    return response
