"""Typed shapes of protocol v1's messages and the error body of §4 (stdlib only)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, NotRequired, TypedDict

from agents.protocol.schema import Problem
from agents.protocol.wire import MAX_HEARTBEAT_S, MAX_LONG_POLL_S


class ErrorBody(TypedDict):
    error: dict[str, Any]  # {"code": str, "message": str, "details": list[Problem]}


class EnrolRequest(TypedDict):
    protocol: int
    bootstrap_token: str
    role: str  # "node" | "fabric"
    hostname: str
    agent_version: str
    machine_id: NotRequired[str]
    inventory: NotRequired[dict[str, Any]]  # {"gpus": [...], "ib_ports": [...], "host": {...}}


class EnrolResponse(TypedDict):
    protocol: int
    node_id: str
    credential: str
    heartbeat_interval_s: int
    long_poll_timeout_s: NotRequired[int]


class ReportAck(TypedDict):
    protocol: int
    seq: int
    status: str  # "accepted" | "duplicate"
    desired_generation: int
    rotate_credential: NotRequired[bool]
    heartbeat_interval_s: NotRequired[int]  # the fleet's current intervals (§8)
    long_poll_timeout_s: NotRequired[int]


class CredentialRotation(TypedDict):
    protocol: int
    credential: str
    previous_valid_until: str  # RFC 3339 UTC


def error_body(code: str, message: str, details: list[Problem] | None = None) -> ErrorBody:
    return {"error": {"code": code, "message": message, "details": details or []}}


class IntervalAdvice(NamedTuple):
    """What the portal last told the agent about its intervals (§8, §9); ``None``: not
    said (an older portal) or out of bounds."""

    heartbeat_s: int | None
    long_poll_s: int | None


def interval_advice(answer: Mapping[str, Any]) -> IntervalAdvice:
    """The intervals an enrolment response or a report acknowledgement carries."""
    return IntervalAdvice(_bounded(answer.get("heartbeat_interval_s"), MAX_HEARTBEAT_S),
                          _bounded(answer.get("long_poll_timeout_s"), MAX_LONG_POLL_S))


def _bounded(value: Any, most: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        return None
    return value
