"""The credential access matrix: every route × the credentials a tester would try.

Credentials (columns, in this order):

- ``browser``: a signed-in session of ``a-admin`` (admin of tenant a).
- ``own_key``: ``dual``'s API key for a (``dual`` is admin of a *and* b).
- ``other_key``: ``dual``'s API key for b — the same user, the other tenant's key.
- ``viewer``: a signed-in session of ``a-viewer``.
- ``removed``: ``ex-admin``, removed from a, presenting both their old session and the API
  key for a they made while they were a member (the API reads the key, pages the session).
  On every DRF route (``/api/``, not the agent API) that key answers 401 (issue 10.7: a key whose user no
  longer belongs to its tenant does not authenticate), whatever the column says; the
  column holds for the other routes (pages, the agent API).

Objects named in URLs belong to tenant a. A write that a credential is refused (an error
status, the sign-in redirect, the removed member's "no tenant" page) must leave its object
as it was; the browser session's page writes must take effect (so the bodies are real).
Expectations: an HTTP status, ``LOGIN`` (a
redirect to the sign-in page: pages and page downloads take a browser session only, a key
there is nobody), or for WebSockets ``ACCEPT`` / the close code. The Django admin is one
row (``admin:*``: Django's own staff-session check guards each of its generated views).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

CREDENTIALS = ("browser", "own_key", "other_key", "viewer", "removed")
LOGIN = "login"
ACCEPT = "accept"
ORDER = {"models": ["H100"], "gpu_count": 1, "duration_hours": 1}
PAGE_ORDER = {"models": "H100", "gpu_count": "1", "gpu_milli": "1000", "nodes": "1",
              "locality": "any", "start": "now", "duration_hours": "1", "priority": "on_demand",
              "idempotency_key": "matrix-preview"}
# within the order limits (portal/leasing/limits.py): a lease lasts at most 90 days
IN_A_WEEK = (datetime.now(UTC) + timedelta(days=7)).isoformat()
# a public literal address (no DNS look-up): valid under the black box's production settings
WEBHOOK = {"url": "https://93.184.215.14/hook", "events": ["budget.alert"]}


def _row(*codes: int | str) -> dict[str, int | str]:
    return dict(zip(CREDENTIALS, codes, strict=True))


ALL_200 = _row(200, 200, 200, 200, 200)
A_READ = _row(200, 200, 404, 200, 404)  # a's data: a's people and a's key; not b's key
A_ADMIN = _row(200, 200, 404, 403, 404)  # a's data, admin-only write
OWN_TENANT = _row(200, 200, 200, 200, 404)  # "your tenant": the key's own, either one
NOBODY = _row(403, 403, 403, 403, 403)  # platform staff only (no column is staff)
# a mig-parted file that leaves the node whole (fixed layout, ADR 0238)
MIG_LAYOUT = {"config": "version: v1\nmig-configs:\n  all-disabled:\n"
                        "    - devices: all\n      mig-enabled: false\n",
              "name": "all-disabled"}
MIG_MODE = {"mode": "whole", "reason": "credential table"}  # whole already: a no-op
PAGE = _row(200, LOGIN, LOGIN, 200, 200)  # removed: the "no tenant" page, nothing of a's
PAGE_MEMBER = _row(200, LOGIN, LOGIN, 403, 200)
PUBLIC = ALL_200
CONSOLE = _row(403, LOGIN, LOGIN, 403, 403)

# route name -> [(method, URL kwargs kind, body, expected by credential)]
Case = tuple[str, str, dict[str, Any], dict[str, int | str]]
ROUTES: dict[str, list[Case]] = {
    # --- REST API v1 ----------------------------------------------------------------------
    "me": [("GET", "none", {}, ALL_200), ("POST", "none", {"tenant": "a"}, A_READ)],
    "capacity": [("GET", "none", {}, ALL_200)],
    "tenant-list": [("GET", "none", {}, ALL_200),
                    ("POST", "none", {"name": "New Co"}, _row(403, 403, 403, 403, 403))],
    "tenant-detail": [("GET", "tenant", {}, A_READ),
                      ("PATCH", "tenant", {"name": "A2"}, A_ADMIN)],
    "tenant-suspend": [("POST", "tenant", {"reason": "x"}, _row(403, 403, 404, 403, 404))],
    "tenant-resume": [("POST", "tenant", {"reason": "x"}, _row(403, 403, 404, 403, 404))],
    "membership-list": [("GET", "tenant_slug", {}, A_READ)],
    # new members come by invitation (202 for any address: no account enumeration)
    "invitation-list": [("GET", "tenant_slug", {}, A_ADMIN),
                        ("POST", "tenant_slug", {"email": "newbie@example.com",
                                                 "role": "member"},
                         _row(202, 202, 404, 403, 404))],
    "invitation-detail": [("DELETE", "invitation", {}, _row(204, 204, 404, 403, 404))],
    "invitation-accept": [("POST", "none", {"token": "gpi_not-a-token"},
                           _row(404, 404, 404, 404, 404))],
    "membership-detail": [("GET", "membership", {}, A_READ),
                          ("PATCH", "membership", {"role": "viewer"}, A_ADMIN),
                          ("DELETE", "membership", {}, _row(204, 204, 404, 403, 404))],
    "apikey-list": [("GET", "none", {}, ALL_200),
                    ("POST", "none", {"name": "ci"}, _row(201, 201, 201, 201, 404))],
    # the key named is dual's key for a: its owner through that key; nobody else
    "apikey-detail": [("GET", "apikey", {}, _row(404, 200, 404, 404, 404)),
                      ("DELETE", "apikey", {}, _row(404, 204, 404, 404, 404))],
    "node-list": [("GET", "none", {}, NOBODY)],
    "storage-endpoint-list": [("GET", "none", {}, NOBODY),
                              ("POST", "none", {"fabric": "default", "node": "storage-01"},
                               NOBODY)],
    "storage-endpoint-detail": [("DELETE", "missing_pk", {}, NOBODY)],
    "node-detail": [("GET", "node", {}, NOBODY)],
    "node-set-state": [("POST", "node", {"state": "draining"}, NOBODY)],
    "gpu-list": [("GET", "none", {}, NOBODY)],
    "gpu-detail": [("GET", "gpu", {}, NOBODY)],
    "switch-list": [("GET", "none", {}, NOBODY)],
    "fabric-list": [("GET", "none", {}, NOBODY)],
    "auditlog-list": [("GET", "none", {}, ALL_200)],
    "auditlog-detail": [("GET", "audit", {}, _row(200, 200, 404, 404, 404))],
    "billing-usage": [("GET", "none", {"type": "csv"}, OWN_TENANT)],
    "billing-invoices": [("GET", "none", {}, OWN_TENANT)],
    # this month's statement as CSV, tenant admins only (the page's file; gpupool invoice)
    "billing-invoice-csv": [("GET", "this_month", {}, _row(200, 200, 404, 403, 404))],
    "billing-budget": [("GET", "none", {}, OWN_TENANT)],
    "billing-showback": [("GET", "none", {}, OWN_TENANT)],
    "order-create": [("POST", "none", ORDER, _row(201, 201, 201, 403, 404))],
    "order-quote": [("POST", "none", ORDER, OWN_TENANT)],
    "quota-usage": [("GET", "none", {}, OWN_TENANT)],
    "lease-list": [("GET", "none", {}, OWN_TENANT)],
    "lease-detail": [("GET", "lease", {}, A_READ)],
    "lease-events": [("GET", "lease", {}, A_READ)],
    "lease-connection": [("GET", "lease", {}, A_READ)],
    "lease-cancel": [("POST", "lease", {}, A_ADMIN)],
    "lease-release": [("POST", "active_lease", {}, A_ADMIN)],
    "lease-extend": [("POST", "active_lease", {"end_at": IN_A_WEEK}, A_ADMIN)],
    # not degraded: 409 for a's people, never another tenant's key (404)
    "lease-degraded": [("POST", "active_lease", {"choice": "wait"},
                        _row(409, 409, 404, 403, 404))],
    "lease-faults": [("GET", "lease", {}, A_READ)],
    "repair-queue": [("GET", "none", {}, NOBODY)],
    "node-service": [("GET", "node", {}, NOBODY),
                     ("POST", "node", {"action": "cordon", "reason": "x"}, NOBODY)],
    "gpu-service": [("POST", "gpu_uuid", {"action": "cordon", "reason": "x"}, NOBODY)],
    "node-mig-layout": [("POST", "node", MIG_LAYOUT, NOBODY)],
    "node-mig-mode": [("PUT", "node", MIG_MODE, NOBODY)],
    # webhooks: owners and admins of the key's / session's tenant (other_key: b's own list)
    "webhook-list": [("GET", "none", {}, _row(200, 200, 200, 403, 404)),
                     ("POST", "none", WEBHOOK,
                      _row(201, 201, 201, 403, 404))],
    "webhook-detail": [("GET", "webhook", {}, A_ADMIN),
                       ("PATCH", "webhook", {"events": ["lease.ended"]}, A_ADMIN),
                       ("DELETE", "webhook", {}, _row(204, 204, 404, 403, 404))],
    "webhook-rotate-secret": [("POST", "webhook", {}, A_ADMIN)],
    "webhook-deliveries": [("GET", "webhook", {}, A_ADMIN)],
    "webhook-delivery-resend": [("POST", "webhook_message", {}, A_ADMIN)],
    "schema": [("GET", "none", {}, PUBLIC)],
    "swagger-ui": [("GET", "none", {}, PUBLIC)],
    "redoc": [("GET", "none", {}, PUBLIC)],
    # --- agent API: node credentials only; no user credential is one ------------------------
    "agent_api:enrol": [("POST", "none", {"protocol": 1, "bootstrap_token": "gpb_forged",
                                          "role": "node", "hostname": "rogue",
                                          "agent_version": "1"},
                         _row(401, 401, 401, 401, 401))],
    "agent_api:reports": [("POST", "node_id", {}, _row(401, 401, 401, 401, 401))],
    "agent_api:desired-state": [("GET", "node_id", {}, _row(401, 401, 401, 401, 401))],
    "agent_api:credential": [("POST", "node_id", {}, _row(401, 401, 401, 401, 401))],
    # any other agent path: a protocol 404 body, whoever asks
    "agent_api:unknown": [("GET", "none", {}, _row(404, 404, 404, 404, 404))],
    # --- public pages ---------------------------------------------------------------------
    "healthz": [("GET", "none", {}, PUBLIC)],
    # Prometheus' scrape: its own bearer token (GPUPOOL_METRICS_TOKEN) or an allow-listed
    # address, never a session or an API key (no header: 401; another bearer: 403)
    "metrics": [("GET", "none", {}, _row(401, 403, 403, 401, 403))],
    "favicon": [("GET", "none", {}, _row(301, 301, 301, 301, 301))],  # -> the static file
    "login": [("GET", "none", {}, PUBLIC),  # wrong password: the form again, nobody signed in
              ("POST", "none", {"username": "a-admin", "password": "wrong"}, PUBLIC),
              ("PUT", "none", {}, PUBLIC)],
    "logout": [("POST", "none", {}, _row(302, 302, 302, 302, 302))],
    "set_language": [("POST", "none", {"language": "en"}, _row(302, 302, 302, 302, 302))],
    "web:password_reset": [("GET", "none", {}, PUBLIC),
                           ("POST", "none", {"email": "nobody@example.com"},
                            _row(302, 302, 302, 302, 302)),
                           ("PUT", "none", {}, PUBLIC)],
    "web:password_reset_done": [("GET", "none", {}, PUBLIC)],
    "web:password_reset_confirm": [("GET", "reset", {}, PUBLIC),  # a forged token: "invalid link"
                                   ("POST", "reset", {"new_password1": "x" * 12,
                                                      "new_password2": "x" * 12}, PUBLIC),
                                   ("PUT", "reset", {}, PUBLIC)],
    "web:password_reset_complete": [("GET", "none", {}, PUBLIC)],
    # SSO (portal/sso): no provider of that name is configured, whoever asks (404); the
    # callback of an unknown sign-in state is refused in words (400), nobody signed in
    "sso:start": [("GET", "sso_provider", {}, _row(404, 404, 404, 404, 404))],
    "sso:callback": [("GET", "sso_provider", {}, _row(400, 400, 400, 400, 400))],
    # --- tenant pages (browser session) -----------------------------------------------------
    "web:dashboard": [("GET", "none", {}, PAGE)],
    "web:profile": [("GET", "none", {}, PAGE)],
    "web:ssh_key_delete": [("POST", "sshkey", {}, _row(302, LOGIN, LOGIN, 404, 404))],
    "web:tenant_switch": [("POST", "none", {"tenant": "a"}, _row(302, LOGIN, LOGIN, 302, 302))],
    "web:order": [("GET", "none", {}, PAGE_MEMBER)],
    "web:order_preview": [("POST", "none", PAGE_ORDER, PAGE_MEMBER)],
    "web:leases": [("GET", "none", {}, PAGE)],
    "web:calendar": [("GET", "none", {}, PAGE)],
    "web:lease": [("GET", "lease_id", {}, PAGE)],
    "web:lease_extend": [("GET", "active_lease_id", {}, PAGE_MEMBER)],
    "web:lease_release": [("GET", "active_lease_id", {}, PAGE_MEMBER)],
    # not degraded: the choice is refused with a message, back to the lease page
    "web:lease_degraded": [("POST", "active_lease_id", {"choice": "wait"},
                            _row(302, LOGIN, LOGIN, 403, 200))],
    "web:lease_cancel": [("GET", "lease_id", {}, PAGE_MEMBER)],
    "web:usage": [("GET", "none", {}, PAGE)],
    "web:members": [("GET", "none", {}, PAGE)],
    "web:invitation_revoke": [("POST", "invitation_id", {}, _row(302, LOGIN, LOGIN, 403, 200))],
    # an unknown token is a 404 for everyone signed in; a key is nobody on pages
    "web:invitation": [("GET", "bad_token", {}, _row(404, LOGIN, LOGIN, 404, 404))],
    # page forms: "{member}" in a field name is the member's id (the forms' prefixes)
    "web:member_role": [("POST", "member_id", {"{member}-role": "viewer"},
                         _row(302, LOGIN, LOGIN, 403, 200))],
    "web:member_limit": [("POST", "member_id", {"limit-{member}-max_gpus": "2"},
                          _row(302, LOGIN, LOGIN, 403, 200))],
    "web:member_remove": [("POST", "member_id", {}, _row(302, LOGIN, LOGIN, 403, 200))],
    "web:api_keys": [("GET", "none", {}, PAGE)],
    "web:api_key_revoke": [("POST", "key_id", {}, _row(302, LOGIN, LOGIN, 404, 200))],
    "web:quotas": [("GET", "none", {}, PAGE)],
    # webhook pages: the tenant's owners and admins (removed: the "no tenant" page)
    "webhooks:list": [("GET", "none", {}, PAGE_MEMBER),
                      ("POST", "none", {**WEBHOOK, "events": "budget.alert"},
                       PAGE_MEMBER)],
    "webhooks:detail": [("GET", "endpoint_id", {}, PAGE_MEMBER),
                        ("POST", "endpoint_id", {"events": ["lease.ended"]},
                         _row(302, LOGIN, LOGIN, 403, 200))],
    "webhooks:enable": [("POST", "endpoint_id", {"enabled": "0"}, _row(302, LOGIN, LOGIN, 403, 200))],
    "webhooks:rotate": [("POST", "endpoint_id", {}, PAGE_MEMBER)],
    "webhooks:delete": [("POST", "endpoint_id", {}, _row(302, LOGIN, LOGIN, 403, 200))],
    "webhooks:resend": [("POST", "message_id", {}, _row(302, LOGIN, LOGIN, 403, 200))],
    "billing:export": [("GET", "none", {"type": "csv"}, _row(200, LOGIN, LOGIN, 200, 404))],
    # this month's statement (a draft with live totals), tenant admins only
    "billing:invoice": [("GET", "this_month", {}, _row(200, LOGIN, LOGIN, 403, 404))],
    "billing:invoice_csv": [("GET", "this_month", {}, _row(200, LOGIN, LOGIN, 403, 404))],
    # --- operators' console (staff session only) -------------------------------------------
    "console:index": [("GET", "none", {}, CONSOLE)],
    "console:fabric": [("GET", "none", {}, CONSOLE)],
    "console:node": [("GET", "node", {}, CONSOLE)],
    "console:gpu_health": [("POST", "gpu", {"health": "healthy"}, CONSOLE)],
    "console:queue": [("GET", "none", {}, CONSOLE)],
    "console:repair": [("GET", "none", {}, CONSOLE),
                       ("POST", "none", {"node": "0", "action": "cordon", "reason": "x"},
                        CONSOLE)],
    "console:partitions": [("GET", "none", {}, CONSOLE)],
    "console:tenants": [("GET", "none", {}, CONSOLE)],
    "console:tenant": [("GET", "tenant", {}, CONSOLE)],
    "console:member_invite": [("POST", "tenant", {"invite-email": "x@example.com",
                                                  "invite-role": "member"}, CONSOLE)],
    "console:member_role": [("POST", "console_member", {"role-{member}-role": "viewer"},
                             CONSOLE)],
    "console:member_remove": [("POST", "console_member", {}, CONSOLE)],
    "console:invitation_revoke": [("POST", "console_invitation", {}, CONSOLE)],
    "console:audit": [("GET", "none", {}, CONSOLE)],
    "console:billing": [("GET", "none", {}, CONSOLE)],
    "console:storage": [("GET", "none", {}, CONSOLE)],
    "console:enrolments": [("GET", "none", {}, CONSOLE)],
    # --- Django admin: every generated view is staff-session only ---------------------------
    "admin:*": [("GET", "none", {}, _row(302, 302, 302, 302, 302))],
}

# WebSocket routes (pattern) -> expected by credential. Channels authenticates sockets by
# the session cookie only; a key is nobody there.
WS_ROUTES: dict[str, dict[str, int | str]] = {
    "ws/leases/<uuid:lease_id>/": _row(ACCEPT, 4404, 4404, ACCEPT, 4404),
}


def expected(case_expected: dict[str, int | str], credential: str, url: str) -> int | str:
    """The answer a credential must get on ``url``: the table's, except that the removed
    member's stale key no longer authenticates anywhere under /api/ but the agent API
    (401; ADR 0112). One rule for the in-process matrix and the black-box harness."""
    if credential == "removed" and url.startswith("/api/") and "/api/agent/" not in url:
        return 401
    return case_expected[credential]
