"""``lease ssh`` and ``lease env``: the lease's connection details (``GET
/leases/{id}/connection``: nodes, SSH endpoints, the NCCL/UCX environment per node)."""

from __future__ import annotations

import shlex
import subprocess
from typing import Any

import click

from agents.gpupoolcli.errors import CliError, Exit
from agents.gpupoolcli.i18n import _
from agents.gpupoolcli.output import output_option, render
from agents.gpupoolcli.session import Session, pass_session


def _nodes(session: Session, lease_id: str, node: str | None) -> list[dict[str, Any]]:
    """The lease's nodes (only ``node`` when named); an error while it has none."""
    nodes: list[dict[str, Any]] = session.api.get(f"/leases/{lease_id}/connection")["nodes"]
    if node:
        nodes = [n for n in nodes if n.get("hostname") == node]
        if not nodes:
            raise CliError(_("Lease {id} has no node {node}.").format(id=lease_id, node=node),
                           Exit.NOT_FOUND)
    if not nodes:
        raise CliError(_("Lease {id} has no nodes yet.").format(id=lease_id), Exit.REFUSED)
    return nodes


def _run_ssh(nodes: list[dict[str, Any]], extra: tuple[str, ...]) -> None:
    if len(nodes) > 1:
        raise click.UsageError(_("The lease has several nodes: pick one with --node."))
    raise SystemExit(subprocess.call([*shlex.split(nodes[0]["ssh"]), *extra]))


def connect_commands(lease: click.Group) -> None:
    @lease.command("ssh", context_settings={"ignore_unknown_options": True})
    @click.argument("lease_id")
    @click.option("--node", default=None, help="Only this node (hostname).")
    @click.option("--run", is_flag=True, help="Run ssh instead of printing the command.")
    @click.argument("ssh_args", nargs=-1, type=click.UNPROCESSED)
    @output_option
    @pass_session
    def lease_ssh(session: Session, lease_id: str, node: str | None, run: bool,
                  ssh_args: tuple[str, ...], fmt: str) -> None:
        """Print (or --run) the SSH command of each node of a lease."""
        nodes = _nodes(session, lease_id, node)
        if run:
            _run_ssh(nodes, ssh_args)
        if fmt == "table":
            for row in nodes:
                click.echo(row["ssh"])
            return
        render([{"hostname": n["hostname"], "ssh": n["ssh"]} for n in nodes], fmt)

    @lease.command("env")
    @click.argument("lease_id")
    @click.option("--node", default=None, help="This node's values (default: the first).")
    @output_option
    @pass_session
    def lease_env(session: Session, lease_id: str, node: str | None, fmt: str) -> None:
        """The NCCL/UCX environment of a lease's node, as shell exports
        (eval "$(gpupool lease env ID)")."""
        first = _nodes(session, lease_id, node)[0]
        env = (first.get("nccl") or {}).get("environment") or {}
        if not env:
            raise CliError(_("No InfiniBand partition for lease {id} on {node} yet.").format(
                id=lease_id, node=first["hostname"]), Exit.REFUSED)
        if fmt == "table":
            for name, value in env.items():
                click.echo(f"export {name}={shlex.quote(str(value))}")
            return
        render(env, fmt)
