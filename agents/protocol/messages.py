"""Typed shapes of protocol v1's messages and the error body of §4 (stdlib only)."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from agents.protocol.schema import Problem


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


class CredentialRotation(TypedDict):
    protocol: int
    credential: str
    previous_valid_until: str  # RFC 3339 UTC


def error_body(code: str, message: str, details: list[Problem] | None = None) -> ErrorBody:
    return {"error": {"code": code, "message": message, "details": details or []}}
