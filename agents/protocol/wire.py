"""Protocol v1 on the wire: version, paths, headers, limits and error codes (stdlib only).

docs/agent-protocol.md is the prose; every name here is shared by the agent, the
portal (``portal.fleet.protocol``) and the fake portal (``agents.client.fakeportal``).
"""

from __future__ import annotations

PROTOCOL_VERSION = 1
API_PREFIX = "/api/agent/v1"
ENROL_PATH = f"{API_PREFIX}/enrol"
REPORTS_PATH = API_PREFIX + "/nodes/{node_id}/reports"
DESIRED_STATE_PATH = API_PREFIX + "/nodes/{node_id}/desired-state"
CREDENTIAL_PATH = API_PREFIX + "/nodes/{node_id}/credential"
AUTH_HEADER = "Authorization"  # "Bearer <credential>"
RETRY_AFTER_HEADER = "Retry-After"  # whole seconds, on 429 and 409 pending_approval
# §5: a report sent because the node's state changed (it converged, a grant expired) asks
# to be served first with the standard Priority header (RFC 9218; u=0..2 counts as urgent,
# the default u=3 and anything without the header is routine)
PRIORITY_HEADER = "Priority"
URGENT_PRIORITY = "u=1"
MAX_LONG_POLL_S = 120  # the portal's long_poll_timeout_s grows with the fleet (§8)
MAX_HEARTBEAT_S = 3600
MAX_TELEMETRY_PER_REPORT = 120
# §1 connections: the portal keeps an idle HTTP/1.1 connection open SERVER_KEEP_ALIVE_S
# (uvicorn ``--timeout-keep-alive``; a proxy's idle timeout at least as long), and an agent
# reuses one for up to CLIENT_KEEP_ALIVE_S, shorter, so the client is the side that closes
# and never sends into a connection the server is closing. Both are above the shortest
# report interval (10 s): with uvicorn's and httpx's 5 s defaults every report of an agent
# opened a new TCP connection on both sides.
SERVER_KEEP_ALIVE_S = 75
CLIENT_KEEP_ALIVE_S = 60

ROLES = ("node", "fabric")
MEMBERSHIPS = ("full", "limited")
# §4: every refusal is {"error": {"code", "message", "details"}} with this status
ERROR_CODES = {
    "invalid_json": 400,
    "invalid_report": 400,
    "invalid_request": 400,
    "unsupported_protocol": 400,
    "invalid_bootstrap_token": 401,
    "unauthenticated": 401,
    "forbidden": 403,
    "enrolment_refused": 403,
    "enrolment_denied": 403,
    "not_found": 404,
    "pending_approval": 409,
    "rate_limited": 429,
}
RETRY_AFTER_CODES = ("pending_approval", "rate_limited")
