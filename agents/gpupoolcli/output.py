"""``-o table|json|yaml``: one renderer for every command. Tables go through rich; JSON
and YAML print the API's own objects, unchanged, for scripts."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

import click
import yaml
from rich.console import Console
from rich.table import Table

FORMATS = ("table", "json", "yaml")


def output_option(func: Any) -> Any:
    """``-o/--output`` on a command (``GPUPOOL_OUTPUT`` sets the default)."""
    return click.option("-o", "--output", "fmt", type=click.Choice(FORMATS),
                        default="table", envvar="GPUPOOL_OUTPUT", show_default=True,
                        help="Output format.")(func)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def _console() -> Console:
    """A terminal's width on a terminal; into a pipe, rows are never cut (ids whole)."""
    width = None if sys.stdout.isatty() else 4096
    return Console(file=sys.stdout, soft_wrap=True, width=width)


def render(data: Any, fmt: str, columns: Sequence[str] | None = None) -> None:
    """A list of objects as rows (``columns`` picked), one object as key/value pairs."""
    out = sys.stdout
    if fmt == "json":
        click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str), file=out)
        return
    if fmt == "yaml":
        click.echo(yaml.safe_dump(data, allow_unicode=True, sort_keys=False).rstrip(),
                   file=out)
        return
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    if isinstance(data, list):
        names = list(columns or (data[0].keys() if data else []))
        for name in names:
            table.add_column(name.upper(), overflow="fold")
        for row in data:
            table.add_row(*(_cell(row.get(name)) for name in names))
    else:
        table.add_column("FIELD")
        table.add_column("VALUE")
        for key in columns or list(data):
            table.add_row(key, _cell(data.get(key)))
    _console().print(table)
