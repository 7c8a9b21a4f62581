"""Who is acting and from where, for the audit log, carried per request/task."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass


@dataclass(frozen=True)
class RequestContext:
    ip: str | None = None
    user_agent: str = ""
    via: str = "system"  # web, api, admin, task, command, agent


_SYSTEM = RequestContext()
_current: contextvars.ContextVar[RequestContext | None] = contextvars.ContextVar(
    "gpupool_request_context", default=None
)


def current() -> RequestContext:
    return _current.get() or _SYSTEM


def set_current(ctx: RequestContext) -> contextvars.Token[RequestContext | None]:
    return _current.set(ctx)


def reset(token: contextvars.Token[RequestContext | None]) -> None:
    _current.reset(token)


def client_ip(meta: dict[str, str]) -> str | None:
    """The client address. Behind a proxy, the proxy must set REMOTE_ADDR correctly."""
    return meta.get("REMOTE_ADDR") or None
