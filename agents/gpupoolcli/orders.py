"""The order a command line describes (``lease create`` and ``quote`` take the same
options): the body of ``POST /orders`` and ``POST /orders/quote``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from agents.gpupoolcli.i18n import _

PRIORITIES = ("reserved", "on_demand", "spot")
LOCALITIES = ("any", "nvlink", "node", "leaf", "spine")


def _tags(values: tuple[str, ...]) -> dict[str, str]:
    tags = {}
    for value in values:
        key, sep, text = value.partition("=")
        if not sep or not key:
            raise click.BadParameter(_("Tags are KEY=VALUE."), param_hint="--tag")
        tags[key] = text
    return tags


def order_options(func: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--gpus", "gpu_count", type=int, default=1, show_default=True,
                     help="GPUs per node."),
        click.option("--model", "models", multiple=True,
                     help="Acceptable GPU model (repeat for several; none = any)."),
        click.option("--nodes", type=int, default=1, show_default=True,
                     help="Gang size: nodes x GPUs, all or nothing."),
        click.option("--gpu-milli", type=int, default=1000, show_default=True,
                     help="Below 1000: that share of one GPU (steps of 125)."),
        click.option("--hours", "duration_hours", type=str, default=None,
                     help="Duration in hours."),
        click.option("--start-at", default=None, help="Start (ISO 8601, UTC); default now."),
        click.option("--end-at", default=None, help="End (ISO 8601) instead of --hours."),
        click.option("--priority", type=click.Choice(PRIORITIES), default="on_demand",
                     show_default=True),
        click.option("--locality", type=click.Choice(LOCALITIES), default="any",
                     show_default=True, help="How close together the GPUs must be."),
        click.option("--locality-required", is_flag=True,
                     help="Refuse a placement that misses --locality."),
        click.option("--name", default="", help="A name for the lease."),
        click.option("--tag", "tags", multiple=True, help="KEY=VALUE (repeatable)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


ORDER_KEYS = ("gpu_count", "models", "nodes", "gpu_milli", "duration_hours", "start_at",
              "end_at", "priority", "locality", "locality_required", "name", "tags")


def order_body(options: dict[str, Any]) -> dict[str, Any]:
    """The API's order fields from the parsed options; the server validates them."""
    body = {key: options[key] for key in ORDER_KEYS}
    body["models"] = list(body["models"])
    body["tags"] = _tags(body["tags"])
    return {key: value for key, value in body.items() if value is not None}
