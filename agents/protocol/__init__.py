"""The one wire protocol between the portal and its agents, version 1 (stdlib only).

docs/agent-protocol.md is the prose, docs/adr/0109-one-wire-protocol.md the decision.
JSON over HTTPS, UTF-8, ``Content-Type: application/json``; every body carries
``"protocol": 1``. Both sides import this package and nothing else of each other: the
agent host installs only ``agents/``, the portal depends on this published protocol and
never on agent code (``.importlinter``: ``portal-imports-only-the-protocol``).

- ``wire``: version, endpoint paths, header names, limits, error codes;
- ``schema``: the declarative field specs (types, bounds, field paths of problems);
- ``bodies``: each request body declared once with the portal's storage bounds;
- ``desired``: the desired-state document as the agent checks it;
- ``messages``: typed shapes (TypedDict) and the error body of §4;
- ``features``: which agent release understands which newer-only key (N-1 upgrades).
"""

from __future__ import annotations

from agents.protocol import schema
from agents.protocol.bodies import (
    CREDENTIAL,
    DESIRED_QUERY,
    ENROL,
    REPORT,
    TS_MAX,
    validate_enrol,
    validate_report,
)
from agents.protocol.desired import ENV_NAME_RE, ENV_VALUE_RE, validate_desired_state
from agents.protocol.features import first_release, supports
from agents.protocol.messages import (
    CredentialRotation,
    EnrolRequest,
    EnrolResponse,
    ErrorBody,
    IntervalAdvice,
    ReportAck,
    error_body,
    interval_advice,
)
from agents.protocol.schema import Problem
from agents.protocol.wire import (
    API_PREFIX,
    AUTH_HEADER,
    CLIENT_KEEP_ALIVE_S,
    CREDENTIAL_PATH,
    DESIRED_STATE_PATH,
    ENROL_PATH,
    ERROR_CODES,
    MAX_HEARTBEAT_S,
    MAX_LONG_POLL_S,
    MAX_TELEMETRY_PER_REPORT,
    MEMBERSHIPS,
    PRIORITY_HEADER,
    PROTOCOL_VERSION,
    REPORTS_PATH,
    RETRY_AFTER_CODES,
    RETRY_AFTER_HEADER,
    ROLES,
    SERVER_KEEP_ALIVE_S,
    URGENT_PRIORITY,
)

__all__ = [
    "API_PREFIX", "AUTH_HEADER", "CLIENT_KEEP_ALIVE_S", "CREDENTIAL", "CREDENTIAL_PATH",
    "DESIRED_QUERY", "DESIRED_STATE_PATH", "ENROL", "ENROL_PATH", "ENV_NAME_RE", "ENV_VALUE_RE",
    "ERROR_CODES", "MAX_HEARTBEAT_S", "MAX_LONG_POLL_S", "MAX_TELEMETRY_PER_REPORT",
    "MEMBERSHIPS", "PRIORITY_HEADER", "PROTOCOL_VERSION", "REPORT", "REPORTS_PATH",
    "RETRY_AFTER_CODES", "RETRY_AFTER_HEADER", "ROLES", "SERVER_KEEP_ALIVE_S", "TS_MAX",
    "URGENT_PRIORITY", "CredentialRotation",
    "EnrolRequest", "EnrolResponse", "ErrorBody", "IntervalAdvice", "Problem", "ReportAck",
    "error_body", "first_release", "interval_advice", "schema", "supports",
    "validate_desired_state", "validate_enrol", "validate_report",
]
