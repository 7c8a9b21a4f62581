"""Reading a management command's input file."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError


def read_input(command: BaseCommand, path: str) -> str:
    """The text of the file at ``path`` (UTF-8), or of the command's stdin where ``path`` is
    ``-``; a file that cannot be read is a CommandError naming it."""
    try:
        return command.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc}") from exc
