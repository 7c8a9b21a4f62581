"""``gpupool usage`` and ``gpupool invoice ls/download``."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import click
import httpx

from agents.gpupoolcli.i18n import _
from agents.gpupoolcli.output import output_option, render
from agents.gpupoolcli.session import Session, pass_session

USAGE_COLUMNS = ("gpu_model", "max_gpus", "guaranteed_gpus", "in_use_gpus",
                 "gpu_hours_this_month", "gpu_hour_budget", "max_lease_hours")
INVOICE_COLUMNS = ("month", "status", "currency", "usage_total", "credit_total", "total",
                   "line_count", "finalized_at")
EXPORT_TYPES = ("csv", "focus-csv", "focus-jsonl")
MONTH = re.compile(r"^(\d{4})-(\d{2})$")


def _save(response: httpx.Response, file: str | None) -> None:
    """The body to ``file`` (``-``: stdout; default: the server's file name)."""
    if file == "-":
        sys.stdout.flush()
        sys.stdout.buffer.write(response.content)
        sys.stdout.buffer.flush()
        return
    disposition = response.headers.get("content-disposition", "")
    found = re.search(r'filename="([^"/\\]+)"', disposition)
    target = Path(file or (found.group(1) if found else "gpupool-download"))
    target.write_bytes(response.content)
    click.echo(_("Saved {path}").format(path=target), err=True)


@click.group(invoke_without_command=True)
@output_option
@click.pass_context
def usage(ctx: click.Context, fmt: str) -> None:
    """Quota and GPU-hours in use this month ('usage export' for usage lines)."""
    if ctx.invoked_subcommand is None:
        session = ctx.find_object(Session)
        assert session is not None
        render(session.api.get("/quotas"), fmt, USAGE_COLUMNS)


@usage.command("export")
@click.option("--type", "kind", type=click.Choice(EXPORT_TYPES), default="focus-csv",
              show_default=True)
@click.option("--from", "start", default=None, help="YYYY-MM-DD (UTC, inclusive).")
@click.option("--to", "end", default=None, help="YYYY-MM-DD (UTC, exclusive).")
@click.option("-f", "--file", default="-", show_default=True, help="Where to write ('-': stdout).")
@pass_session
def usage_export(session: Session, kind: str, start: str | None, end: str | None,
                 file: str) -> None:
    """Usage lines (CSV, or FinOps FOCUS as CSV or JSON Lines)."""
    params = {k: v for k, v in (("type", kind), ("from", start), ("to", end)) if v}
    _save(session.api.download("/billing/usage", **params), file)


@click.group()
def invoice() -> None:
    """Your tenant's monthly invoices."""


@invoice.command("ls")
@output_option
@pass_session
def invoice_ls(session: Session, fmt: str) -> None:
    """List invoices."""
    render(session.api.get("/billing/invoices")["results"], fmt, INVOICE_COLUMNS)


@invoice.command("download")
@click.argument("month")
@click.option("-f", "--file", default=None, help="Where to write ('-': stdout; default: the "
              "server's file name).")
@pass_session
def invoice_download(session: Session, month: str, file: str | None) -> None:
    """One month's invoice (YYYY-MM) as CSV (tenant admins)."""
    if not MONTH.match(month):
        raise click.BadParameter(_("Give the month as YYYY-MM."), param_hint="MONTH")
    _save(session.api.download(f"/billing/invoices/{month}.csv"), file)
