"""Exit codes a script can rely on, and the one error type that carries them."""

from __future__ import annotations

import sys
from enum import IntEnum
from typing import IO, Any

import click

from agents.gpupoolcli.i18n import _


class Exit(IntEnum):
    OK = 0
    REFUSED = 1  # the server refused or failed (4xx/5xx), or a lease ended without starting
    USAGE = 2  # bad command line (click's own code)
    NOT_FOUND = 3  # 404
    AUTH = 4  # 401/403, or no URL/API key configured
    NETWORK = 5  # the portal could not be reached (connection refused, timeout)
    WAIT_TIMEOUT = 6  # --wait gave up before the lease became active
    INTERRUPTED = 130  # Ctrl-C (an order already placed stays in place)


def exit_for_status(status: int) -> Exit:
    if status == 404:
        return Exit.NOT_FOUND
    if status in (401, 403):
        return Exit.AUTH
    return Exit.REFUSED


class CliError(click.ClickException):
    """A message for stderr (the server's own words where it answered) and an exit code;
    ``fields`` are the server's per-field messages, printed one a line."""

    def __init__(self, message: str, code: Exit = Exit.REFUSED, *,
                 fields: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.exit_code = int(code)  # type: ignore[misc]  # click reads it per instance
        self.fields = fields or {}

    def show(self, file: IO[Any] | None = None) -> None:
        echo = sys.stderr if file is None else file
        click.echo(_("Error: {message}").format(message=self.message), file=echo)
        for name, messages in self.fields.items():
            text = "; ".join(str(m) for m in messages) if isinstance(messages, list) \
                else str(messages)
            click.echo(f"  {name}: {text}", file=echo)
