"""A service's refusal shown on the form that asked (pages and the console alike)."""

from __future__ import annotations

from django.forms import Form

from portal.core.errors import ApplicationError, NotFound, PermissionDenied


def apply_errors(form: Form, exc: ApplicationError) -> None:
    """Put a service's field messages next to the form's fields (unknown ones on top).

    Refusals (403) and unknown objects (404) are not form errors: they propagate.
    """
    if isinstance(exc, PermissionDenied | NotFound):
        raise exc
    if not exc.fields:
        form.add_error(None, exc.message)
        return
    for field, messages in exc.fields.items():
        target = field if field in form.fields else None
        for message in messages:
            form.add_error(target, message)
