"""Reading a management command's input file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError

# Options a command reading ``-`` takes from ``call_command`` without a flag of its own.
STDIN_OPTION = ("stdin",)


def read_input(path: str, options: dict[str, Any]) -> str:
    """The text of the file at ``path`` (UTF-8), or of stdin where ``path`` is ``-``
    (``options["stdin"]`` when ``call_command`` passes one, else the process's); a file
    that cannot be read is a CommandError naming it."""
    try:
        if path == "-":
            return str((options.get("stdin") or sys.stdin).read())
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc}") from exc
