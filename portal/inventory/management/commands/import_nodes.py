from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import yaml
from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.core.errors import ApplicationError
from portal.inventory.services import nodes_import, validate_node_spec


def read_rows(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".csv":
        return list(csv.DictReader(text.splitlines()))
    data = yaml.safe_load(text)
    if isinstance(data, dict):
        data = data.get("nodes", [])
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise CommandError(f"{path}: expected a list of node mappings (or 'nodes:' list)")
    return data


class Command(BaseCommand):
    help = ("Import nodes from YAML or CSV (hostname, gpu_model, gpu_count, nvlink, cpu_cores, "
            "memory_gib, hca_guids). Idempotent; all or nothing.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file")

    def handle(self, *args: Any, **opts: Any) -> None:
        path = Path(opts["file"])
        try:
            rows = read_rows(path)
        except (OSError, yaml.YAMLError) as exc:
            raise CommandError(f"cannot read {path}: {exc}") from exc
        try:
            specs = [validate_node_spec(row, f"{path}: row {i}")
                     for i, row in enumerate(rows, start=1)]
            report = nodes_import(actor=None, specs=specs)
        except ApplicationError as exc:
            raise CommandError(f"{exc.message} (nothing was imported)") from exc
        self.stdout.write(json.dumps(report.as_dict(), indent=2, sort_keys=True))
