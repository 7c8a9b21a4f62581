"""``gpupool lease …``: order, list, show, extend, release, cancel, ssh, env."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import click

from agents.gpupoolcli.connect import connect_commands
from agents.gpupoolcli.i18n import _
from agents.gpupoolcli.orders import order_body, order_options
from agents.gpupoolcli.output import output_option, render
from agents.gpupoolcli.session import Session, pass_session
from agents.gpupoolcli.waiting import wait_active

LIST_COLUMNS = ("id", "name", "state", "gpu_model", "total_gpus", "nodes", "priority",
                "queue_position", "end_at")
SHOW_COLUMNS = ("id", "name", "tenant", "state", "state_reason", "wait_reason",
                "queue_position", "earliest_start", "gpu_model", "models", "gpu_count",
                "gpu_milli", "nodes", "total_gpus", "locality", "priority", "start_at",
                "end_at", "active_at", "ended_at", "created", "tags")


@click.group()
def lease() -> None:
    """Your tenant's leases."""


@lease.command("create")
@order_options
@click.option("--wait", is_flag=True, help="Wait until the lease is active (progress on stderr).")
@click.option("--wait-timeout", type=float, default=3600, show_default=True,
              help="Seconds --wait waits before giving up (exit 6).")
@click.option("--interval", type=float, default=2.0, show_default=True,
              help="Seconds between polls while waiting.")
@click.option("--idempotency-key", default=None,
              help="Retry-safe key (default: a fresh one per call).")
@output_option
@pass_session
def lease_create(session: Session, /, wait: bool, wait_timeout: float, interval: float,
                 idempotency_key: str | None, fmt: str, **options: Any) -> None:
    """Order GPUs; prints the lease (queued, or active with --wait)."""
    key = idempotency_key or str(uuid.uuid4())
    created = session.api.post("/orders", order_body(options),
                               headers={"Idempotency-Key": key})
    if wait:
        created = wait_active(session.api, created, interval_s=interval,
                              timeout_s=wait_timeout)
    render(created, fmt, SHOW_COLUMNS)


@lease.command("ls")
@click.option("--state", default=None, help="Comma-separated states, e.g. active,queued.")
@click.option("--model", default=None, help="Only leases of this GPU model.")
@output_option
@pass_session
def lease_ls(session: Session, state: str | None, model: str | None, fmt: str) -> None:
    """List leases."""
    params = {k: v for k, v in (("state", state), ("model", model)) if v}
    render(list(session.api.pages("/leases", **params)), fmt, LIST_COLUMNS)


@lease.command("show")
@click.argument("lease_id")
@output_option
@pass_session
def lease_show(session: Session, lease_id: str, fmt: str) -> None:
    """One lease."""
    render(session.api.get(f"/leases/{lease_id}"), fmt, SHOW_COLUMNS)


def _new_end(session: Session, lease_id: str, hours: float | None, until: str | None) -> str:
    if until:
        return until
    if hours is None:
        raise click.UsageError(_("Give --hours or --until."))
    current = session.api.get(f"/leases/{lease_id}")
    if not current.get("end_at"):
        raise click.UsageError(_("The lease has no end yet; give --until."))
    end = datetime.fromisoformat(str(current["end_at"]).replace("Z", "+00:00"))
    return (end + timedelta(hours=hours)).isoformat()


@lease.command("extend")
@click.argument("lease_id")
@click.option("--hours", type=float, default=None, help="Move the end this many hours later.")
@click.option("--until", default=None, help="The new end (ISO 8601).")
@output_option
@pass_session
def lease_extend(session: Session, lease_id: str, hours: float | None, until: str | None,
                 fmt: str) -> None:
    """Move a lease's end later (the server says how far it can go when it can't)."""
    end_at = _new_end(session, lease_id, hours, until)
    render(session.api.post(f"/leases/{lease_id}/extend", {"end_at": end_at}), fmt,
           SHOW_COLUMNS)


def _act(action: str, helptext: str) -> None:
    @lease.command(action, help=helptext)
    @click.argument("lease_id")
    @click.option("--reason", default="", help="Why (kept in the lease's history).")
    @output_option
    @pass_session
    def command(session: Session, lease_id: str, reason: str, fmt: str) -> None:
        render(session.api.post(f"/leases/{lease_id}/{action}", {"reason": reason}), fmt,
               SHOW_COLUMNS)


_act("release", "End an active lease now (billing stops).")
_act("cancel", "Cancel a lease before it is active.")
connect_commands(lease)
