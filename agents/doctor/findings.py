"""One doctor finding: a check's name, its status, what was found and what to do."""

from __future__ import annotations

from dataclasses import dataclass

OK, WARN, FAIL = "ok", "warn", "fail"


@dataclass(frozen=True)
class Finding:
    check: str
    status: str  # ok | warn | fail
    message: str
    fix: str = ""


def ok(check: str, message: str) -> Finding:
    return Finding(check, OK, message)


def warn(check: str, message: str, fix: str) -> Finding:
    return Finding(check, WARN, message, fix)


def fail(check: str, message: str, fix: str) -> Finding:
    return Finding(check, FAIL, message, fix)
