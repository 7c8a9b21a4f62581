"""Cells that a spreadsheet will not run: the one defence against CSV (formula) injection.

Every CSV the portal writes goes through this module (OWASP "CSV Injection"):

- :func:`defuse` gives a text cell that starts with ``=``, ``+``, ``-``, ``@``, a tab, a
  carriage return or a line feed a leading ``'``, so Excel, LibreOffice and Google Sheets
  show it as text instead of evaluating it (``=HYPERLINK(…)`` in a lease name stays text).
  A plain decimal number that starts with ``-`` (``-1.5``, ``-10.000000``: what the portal
  writes for credits) is left alone: a spreadsheet reads it as a number and it cannot
  carry a formula. Only ASCII digits, one optional point and an optional exponent count;
  anything else after the ``-`` (``-1+1``, ``-A1``) is defused.
- :func:`writer` is the ``csv`` writer to use. Python's writer quotes a field only for the
  characters of its line terminator, so with ``"\\n"`` a bare carriage return inside a cell
  was written unquoted — and a spreadsheet ends the row there and starts a fresh, unguarded
  cell (``x\\r=1+1``). This writer quotes on CR and LF and still ends lines with ``"\\n"``.

JSON Lines exports are data for programs and are not touched.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from typing import Any, Protocol

TRIGGERS = frozenset("=+-@\t\r\n")
_NEGATIVE_NUMBER = re.compile(r"-(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_QUOTING_TERMINATOR = "\r\n"  # every character of it makes the writer quote a field


class _Text(Protocol):
    def write(self, value: str, /) -> Any: ...


def defuse(cell: str) -> str:
    """``cell``, prefixed with ``'`` when a spreadsheet would read it as a formula."""
    if cell[:1] not in TRIGGERS or _NEGATIVE_NUMBER.fullmatch(cell):
        return cell
    return "'" + cell


def defuse_row(row: Iterable[Any]) -> list[Any]:
    """A CSV row with every text cell defused (numbers and None as they are). The first
    character is tested inline: most cells are left alone without a call."""
    triggers, fix = TRIGGERS, defuse
    return [fix(cell) if isinstance(cell, str) and cell[:1] in triggers else cell
            for cell in row]


class _LineFeeds:
    """Hands each row on with ``\\n`` in place of the writer's ``\\r\\n`` terminator (the
    ``csv`` writer writes one whole row, terminator last, per ``write`` call)."""

    def __init__(self, out: _Text) -> None:
        self.out = out

    def write(self, row: str) -> Any:
        return self.out.write(row[:-2] + "\n")


def writer(out: _Text) -> Any:
    """A ``csv.writer`` onto ``out`` that quotes fields holding CR or LF, lines ending in
    ``\\n``. Callers defuse the cells (:func:`defuse_row`)."""
    return csv.writer(_LineFeeds(out), lineterminator=_QUOTING_TERMINATOR)
