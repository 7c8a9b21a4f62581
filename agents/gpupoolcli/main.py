"""The ``gpupool`` command (console script ``gpupool = agents.gpupoolcli.main:main``).

Exit codes (``errors.Exit``): 0 done, 1 the server refused (its message on stderr) or the
lease ended without starting, 2 bad command line, 3 not found, 4 not signed in / key
refused, 5 portal unreachable, 6 ``--wait`` timed out, 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import sys

import click
from click.shell_completion import get_completion_class

from agents import __version__
from agents.gpupoolcli.billing import invoice, usage
from agents.gpupoolcli.config import DEFAULT_PROFILE, Profile, profile_save
from agents.gpupoolcli.errors import CliError, Exit
from agents.gpupoolcli.i18n import _
from agents.gpupoolcli.lease import lease
from agents.gpupoolcli.orders import order_body, order_options
from agents.gpupoolcli.output import output_option, render
from agents.gpupoolcli.session import Session, pass_session

QUOTE_COLUMNS = ("price", "currency", "unit_price", "model", "placeable_now",
                 "earliest_start", "reason", "fits_quota", "fits_budget", "messages")
COMPLETE_VAR = "_GPUPOOL_COMPLETE"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--profile", envvar="GPUPOOL_PROFILE", default=DEFAULT_PROFILE,
              show_default=True, help="Stored profile to use.")
@click.option("--url", envvar="GPUPOOL_URL", default="", help="Portal URL (env GPUPOOL_URL).")
@click.option("--api-key", envvar="GPUPOOL_API_KEY", default="",
              help="API key (env GPUPOOL_API_KEY).")
@click.version_option(__version__, prog_name="gpupool")
@click.pass_context
def cli(ctx: click.Context, profile: str, url: str, api_key: str) -> None:
    """Lease GPUs from a gpupool portal."""
    session = Session(profile=profile, url=url, api_key=api_key)
    ctx.obj = session
    ctx.call_on_close(session.close)


@cli.command()
@click.option("--url", "new_url", default=None, help="The portal URL (prompted when unknown).")
@click.option("--key", "new_key", default=None, help="The API key (prompted when left out).")
@output_option
@pass_session
def login(session: Session, new_url: str | None, new_key: str | None, fmt: str) -> None:
    """Check an API key against the portal and store it in the profile (mode 0600)."""
    url = new_url or session.resolved()[0] or click.prompt(_("Portal URL"))
    session.url = url
    session.api_key = new_key or session.api_key or click.prompt(_("API key"),
                                                                  hide_input=True)
    me = session.api.get("/me")
    path = profile_save(Profile(name=session.profile, url=url.rstrip("/"),
                                api_key=session.api_key))
    click.echo(_("Signed in as {user} (tenant {tenant}); saved to {path}").format(
        user=me.get("username"), tenant=me.get("active_tenant") or "-", path=path), err=True)
    render(me, fmt, ("username", "email", "active_tenant"))


@cli.command()
@order_options
@output_option
@pass_session
def quote(session: Session, /, fmt: str, **options: object) -> None:
    """Price and earliest start of an order, without placing it."""
    render(session.api.post("/orders/quote", order_body(options)), fmt, QUOTE_COLUMNS)


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script (e.g. eval "$(gpupool completion bash)")."""
    completer = get_completion_class(shell)
    assert completer is not None
    click.echo(completer(cli, {}, "gpupool", COMPLETE_VAR).source())


cli.add_command(lease)
cli.add_command(usage)
cli.add_command(invoice)


def main() -> None:
    """Run the command; Ctrl-C anywhere exits 130, errors print the server's words."""
    try:
        code = cli.main(prog_name="gpupool", complete_var=COMPLETE_VAR, standalone_mode=False)
    except CliError as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo(_("Interrupted."), err=True)
        sys.exit(Exit.INTERRUPTED)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
