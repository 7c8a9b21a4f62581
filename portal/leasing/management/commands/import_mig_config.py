from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.core.errors import ApplicationError
from portal.core.management.inputs import STDIN_OPTION, read_input
from portal.inventory.models import Node
from portal.leasing import miglayout


class Command(BaseCommand):
    help = ("Apply a named config of an NVIDIA mig-parted file to a node (fixed MIG layout, "
            "ADR 0238); all or nothing.")
    stealth_options = STDIN_OPTION  # call_command(..., stdin=...) for '-'

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="mig-parted config file ('-' for stdin)")
        parser.add_argument("--node", required=True, help="hostname")
        parser.add_argument("--config", required=True, help="the config of mig-configs")
        parser.add_argument("--gpu", type=int, help="only this GPU index (its override)")

    def handle(self, *args: Any, **opts: Any) -> None:
        path = opts["file"]
        text = read_input(path, opts)
        node = Node.objects.filter(hostname__iexact=opts["node"]).first()
        if node is None:
            raise CommandError(f"no node {opts['node']!r}")
        try:
            applied = miglayout.apply_config(actor=None, node=node, text=text,
                                             name=opts["config"], gpu_index=opts["gpu"])
        except ApplicationError as exc:
            raise CommandError(f"{path}: {exc.message} (nothing was changed)") from exc
        self.stdout.write(json.dumps(applied, indent=2, sort_keys=True))
