"""One application error type; interfaces map it to responses (HackSoft style)."""

from __future__ import annotations


class ApplicationError(Exception):
    """A business rule refused the request. ``fields`` names the offending inputs;
    ``refs`` (optional) names records the refusal created, e.g. the REJECTED lease."""

    status_code = 400
    code = "invalid"

    def __init__(self, message: str, *, fields: dict[str, list[str]] | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields or {}
        self.refs: dict[str, str] = {}
        if code:
            self.code = code


class PermissionDenied(ApplicationError):
    status_code = 403
    code = "permission_denied"


class NotFound(ApplicationError):
    status_code = 404
    code = "not_found"


class Conflict(ApplicationError):
    status_code = 409
    code = "conflict"
