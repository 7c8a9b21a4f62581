"""Errors of the agent protocol (§4): they render as ``{"error": {code, message, details}}``."""

from __future__ import annotations

from portal.core.errors import ApplicationError
from portal.fleet import protocol


class AgentError(ApplicationError):
    """A protocol error; ``status_code`` follows the code (protocol.ERROR_CODES).
    ``retry_after`` (seconds) is sent as the ``Retry-After`` header (429, 409 pending)."""

    def __init__(self, code: str, message: str,
                 details: list[protocol.Problem] | None = None,
                 retry_after: int | None = None) -> None:
        super().__init__(message, code=code)
        self.status_code = protocol.ERROR_CODES.get(code, 400)
        self.details = details or []
        self.retry_after = retry_after

    def body(self) -> protocol.ErrorBody:
        return protocol.error_body(self.code, self.message, self.details)
