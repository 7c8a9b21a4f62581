"""``lease create --wait``: poll the lease until it is active, telling stderr what it waits
for (state, queue position, earliest start, the reason). Ctrl-C stops the waiting only:
the order stays in place."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import click

from agents.gpupoolcli.api import Api
from agents.gpupoolcli.errors import CliError, Exit
from agents.gpupoolcli.i18n import _

RUNNING = ("active", "notice")  # notice: a spot lease told it will be preempted
pause: Callable[[float], None] = time.sleep  # replaced in tests
ENDED = ("ended", "rejected", "cancelled", "failed", "preempted", "expired", "releasing")


def progress_line(lease: dict[str, Any]) -> str:
    parts = [_("state {state}").format(state=lease.get("state"))]
    if lease.get("queue_position"):
        parts.append(_("queue position {n}").format(n=lease["queue_position"]))
    if lease.get("earliest_start"):
        parts.append(_("earliest start {at}").format(at=lease["earliest_start"]))
    if lease.get("wait_reason"):
        parts.append(str(lease["wait_reason"]))
    return " · ".join(parts)


def wait_active(api: Api, lease: dict[str, Any], *, interval_s: float,
                timeout_s: float) -> dict[str, Any]:
    """The lease once it runs; ``CliError`` when it ends first, on timeout or on Ctrl-C."""
    deadline = time.monotonic() + timeout_s
    shown = ""
    try:
        while True:
            line = progress_line(lease)
            if line != shown:
                click.echo(f"{lease['id']}: {line}", err=True)
                shown = line
            if lease["state"] in RUNNING:
                return lease
            if lease["state"] in ENDED:
                raise CliError(_("Lease {id} ended as {state}: {reason}").format(
                    id=lease["id"], state=lease["state"],
                    reason=lease.get("state_reason") or "-"), Exit.REFUSED)
            if time.monotonic() >= deadline:
                raise CliError(_("Gave up waiting; lease {id} is still {state}.").format(
                    id=lease["id"], state=lease["state"]), Exit.WAIT_TIMEOUT)
            pause(interval_s)
            lease = api.get(f"/leases/{lease['id']}")
    except KeyboardInterrupt:
        raise CliError(_("Interrupted; the order stays in place: gpupool lease show {id}")
                       .format(id=lease["id"]), Exit.INTERRUPTED) from None
