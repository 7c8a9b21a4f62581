"""The portal's one door to the wire protocol (``agents.protocol``, ADR 0109).

The protocol — messages, field schemas with bounds, error codes, version — has one home,
the stdlib-only package ``agents.protocol`` that the agents publish; the portal imports
it here and only here (``.importlinter``: ``portal-imports-only-the-protocol``), so the
rest of the portal keeps ``from portal.fleet import protocol``. What stays portal-side is
how the portal serves it (body size, heartbeat interval, long-poll timeout: ``api.views``).
"""

from __future__ import annotations

from agents.protocol import (
    CREDENTIAL,
    DESIRED_QUERY,
    ENROL,
    ERROR_CODES,
    MAX_LONG_POLL_S,
    MAX_TELEMETRY_PER_REPORT,
    MEMBERSHIPS,
    PROTOCOL_VERSION,
    REPORT,
    RETRY_AFTER_HEADER,
    ROLES,
    TS_MAX,
    ErrorBody,
    Problem,
    error_body,
    first_release,
    schema,
    supports,
    validate_desired_state,
    validate_enrol,
    validate_report,
)

__all__ = [
    "CREDENTIAL",
    "DESIRED_QUERY",
    "ENROL",
    "ERROR_CODES",
    "MAX_LONG_POLL_S",
    "MAX_TELEMETRY_PER_REPORT",
    "MEMBERSHIPS",
    "PROTOCOL_VERSION",
    "REPORT",
    "RETRY_AFTER_HEADER",
    "ROLES",
    "TS_MAX",
    "ErrorBody",
    "Problem",
    "error_body",
    "first_release",
    "schema",
    "supports",
    "validate_desired_state",
    "validate_enrol",
    "validate_report",
]
