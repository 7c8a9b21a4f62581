"""The agent API, protocol v1 (docs/agent-protocol.md): parse → call a service → render.

Plain Django views (no DRF) keep the hot path lean and the error bodies exactly as §4.
The long-poll (``longpoll.py``) is an async view that holds no transaction (and no
connection) while waiting, and costs one query per timeout when idle.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from portal.core.errors import ApplicationError
from portal.fleet import intervals, jsonbody, protocol
from portal.fleet.api import dbthread, longpoll
from portal.fleet.api.auth import agent_auth
from portal.fleet.api.dbthread import run_db
from portal.fleet.api.throttle import throttle
from portal.fleet.errors import AgentError
from portal.fleet.protocol import schema
from portal.fleet.services.enrolment import agent_enrol, credential_rotate
from portal.fleet.services.ingest import report_ingest

log = logging.getLogger("portal.fleet.agent_api")
MAX_BODY_BYTES = 16 * 2**20
PENDING_RETRY_S = 60


def _error(exc: ApplicationError) -> JsonResponse:
    if isinstance(exc, AgentError):
        response = JsonResponse(exc.body(), status=exc.status_code)
        if exc.retry_after is not None:
            response[protocol.RETRY_AFTER_HEADER] = str(exc.retry_after)
        return response
    details = [{"field": f, "problem": "; ".join(m)} for f, m in exc.fields.items()]
    return JsonResponse(protocol.error_body(exc.code, exc.message, details),
                        status=exc.status_code)


def agent_endpoint(method: str, prioritised: bool = False,
                   ) -> Callable[[Callable[..., HttpResponse]], Any]:
    """Turn a sync handler into an async, CSRF-exempt view that runs it in the agent
    API's database threads (``dbthread``) and renders protocol errors (§4);
    ``prioritised``: a request marked urgent (``Priority: u=0..2``) goes first."""

    def decorate(view: Callable[..., HttpResponse]) -> Any:
        def handle(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            try:
                return view(request, *args, **kwargs)
            except ApplicationError as exc:
                if exc.code not in ("unauthenticated", "forbidden", "rate_limited"):
                    log.warning("agent API %s %s: %s %s %s", request.method, request.path,
                                exc.code, exc.message, getattr(exc, "details", [])[:3])
                return _error(exc)

        @csrf_exempt
        @functools.wraps(view)
        async def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method != method:
                return HttpResponseNotAllowed([method])
            first = prioritised and dbthread.urgent(request)
            return await run_db(request, handle, request, *args, first=first, **kwargs)
        return wrapper
    return decorate


def _max_body() -> int:
    return int(getattr(settings, "GPUPOOL_AGENT_MAX_BODY_BYTES", MAX_BODY_BYTES))


def _raw(request: HttpRequest) -> bytes:
    """The body, read directly: a report may carry up to 120 samples (a spool resend after
    an outage), above Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (2.5 MB) that guards forms.
    Our own bound is ``GPUPOOL_AGENT_MAX_BODY_BYTES`` (16 MiB)."""
    limit = _max_body()
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > limit:
        raise AgentError("invalid_request", f"body larger than {limit} bytes",
                         [{"field": "$", "problem": f"at most {limit} bytes"}])
    return request.read(limit + 1)


def _body(request: HttpRequest, spec: schema.Spec, code: str) -> dict[str, Any]:
    """The body parsed (``jsonbody.parse_json``: size, depth, finite numbers, clean strings)
    and checked against the endpoint's ``spec``; ``code`` names a failed check (§4)."""
    try:
        body = jsonbody.parse_json(_raw(request), max_bytes=_max_body())
    except jsonbody.BodyError as exc:
        code_for = code if exc.field != "$" else \
            "invalid_request" if "larger" in exc.problem else "invalid_json"
        raise AgentError(code_for, f"{exc.field}: {exc.problem}",
                         [{"field": exc.field, "problem": exc.problem}]) from None
    if not isinstance(body, dict):
        raise AgentError("invalid_json", "body is not a JSON object")
    if "protocol" in body and body["protocol"] != protocol.PROTOCOL_VERSION:
        raise AgentError("unsupported_protocol",
                         f"unsupported protocol {str(body['protocol'])[:20]!r}; "
                         "this server speaks 1")
    if problems := schema.problems(spec, body):
        raise AgentError(code, f"{len(problems)} problem(s)", problems)
    return body


@agent_endpoint("POST")
def enrol(request: HttpRequest) -> HttpResponse:
    body = _body(request, protocol.ENROL, "invalid_request")
    throttle(scope="enrol", secret=body["bootstrap_token"])
    result = agent_enrol(body=body, remote_addr=request.META.get("REMOTE_ADDR") or "")
    if result.state == "pending":
        raise AgentError("pending_approval", "this host would replace an enrolled agent: "
                         "an operator must approve it; retry later with the same token",
                         retry_after=_pending_retry_s())
    if result.state == "denied":
        raise AgentError("enrolment_denied", "an operator denied this enrolment")
    return JsonResponse({"protocol": 1, "node_id": result.agent.agent_id,
                         "credential": result.credential,
                         **intervals.current().wire()}, status=201)


def _pending_retry_s() -> int:
    return int(getattr(settings, "GPUPOOL_AGENT_PENDING_RETRY_S", PENDING_RETRY_S))


@agent_endpoint("POST", prioritised=True)
def reports(request: HttpRequest, node_id: str) -> HttpResponse:
    cred, previous = agent_auth.authenticate_for_report(request, node_id)
    body = _body(request, protocol.REPORT, "invalid_report")
    if body["node_id"] != node_id:
        raise AgentError("forbidden", "report is for another node")
    return JsonResponse({**report_ingest(agent=cred.agent, body=body, previous=previous),
                         **intervals.current().wire()})


@agent_endpoint("POST")
def credential(request: HttpRequest, node_id: str) -> HttpResponse:
    cred = agent_auth.authenticate(request, node_id)
    _body(request, protocol.CREDENTIAL, "invalid_request")
    raw, until = credential_rotate(agent=cred.agent)
    return JsonResponse({"protocol": 1, "credential": raw,
                         "previous_valid_until": until.isoformat()}, status=201)


@csrf_exempt
def unknown_endpoint(request: HttpRequest) -> HttpResponse:
    """Any other path under the agent API: 404 ``not_found`` as a protocol body (§4)."""
    return _error(AgentError("not_found", "no such endpoint"))


def _params(request: HttpRequest) -> tuple[int, float]:
    values, problems = schema.parse_query(request.GET, protocol.DESIRED_QUERY)
    if problems:
        raise AgentError("invalid_request", f"{len(problems)} problem(s)", problems)
    return int(values["after_generation"]), float(values["wait"])


@csrf_exempt
async def desired_state(request: HttpRequest, node_id: str) -> HttpResponse:
    if request.method != "GET":
        return HttpResponseNotAllowed(["GET"])
    try:
        after, wait = _params(request)
        raw, credential_hash = agent_auth.unthrottled_hash(request)
        return await longpoll.long_poll(request, credential_hash, node_id, after, wait,
                                        throttle_secret=raw)
    except ApplicationError as exc:
        return _error(exc)
