from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.core.management.inputs import STDIN_OPTION, read_input
from portal.inventory.ibnetdiscover import TopologyParseError
from portal.inventory.services import fabric_import


class Command(BaseCommand):
    help = "Import an InfiniBand fabric from ibnetdiscover output (idempotent)."
    stealth_options = STDIN_OPTION  # call_command(..., stdin=...) for '-'

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="ibnetdiscover output ('-' for stdin)")
        parser.add_argument("--fabric", default="fabric-1", help="fabric name")
        parser.add_argument("--map", dest="map_file",
                            help="CSV 'node_desc_or_guid,hostname' to map HCAs to nodes")
        parser.add_argument("--create-nodes", action="store_true",
                            help="create nodes for HCAs whose hostname is unknown")

    def handle(self, *args: Any, **opts: Any) -> None:
        path = opts["file"]
        text = read_input(path, opts)
        mapping: dict[str, str] = {}
        if opts["map_file"]:
            with Path(opts["map_file"]).open(encoding="utf-8") as fh:
                mapping = {row[0].strip(): row[1].strip() for row in csv.reader(fh)
                           if len(row) >= 2 and not row[0].startswith("#")}
        try:
            report = fabric_import(actor=None, fabric_name=opts["fabric"], text=text,
                                   hostname_map=mapping, create_nodes=opts["create_nodes"])
        except TopologyParseError as exc:
            raise CommandError(f"{path}: {exc} (nothing was imported)") from exc
        self.stdout.write(json.dumps(report.as_dict(), indent=2, sort_keys=True))
        self.stdout.write("changed" if report.changed else "no changes")
