"""``manage.py gpupool_version [--check]`` (``manage.py version`` is routed here by our
``manage.py``): the deployed gpupool version, the agent protocol version and the schema
state (unapplied migrations listed; ``--check`` exits 1 if there are any, so a unit's
ExecStartPre can refuse to start on a stale schema).

Not named ``version``: Django's ``ManagementUtility`` answers the subcommand ``version``
itself (it prints Django's version and exits 0) before it looks for a command of that name,
so a ``version`` command ran only under ``call_command`` and ``version --check`` in a unit
never refused anything (found by tests/upgrade/test_migrate_under_old_code.py)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from portal.fleet.protocol import PROTOCOL_VERSION


def gpupool_version() -> str:
    try:
        data = tomllib.loads((Path(settings.BASE_DIR) / "pyproject.toml").read_text())
        return str(data["project"]["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "unknown"


def unapplied_migrations() -> list[str]:
    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    return [f"{m.app_label}.{m.name}" for m, backwards in plan if not backwards]


class Command(BaseCommand):
    help = "Print the deployed version, the agent protocol version and the schema state."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--check", action="store_true",
                            help="exit 1 if any migration is unapplied")

    def handle(self, *args: Any, **options: Any) -> None:
        pending = unapplied_migrations()
        self.stdout.write(f"gpupool {gpupool_version()}")
        self.stdout.write(f"agent protocol {PROTOCOL_VERSION}")
        if pending:
            self.stdout.write(f"schema: {len(pending)} unapplied migration(s)")
            for name in pending:
                self.stdout.write(f"  {name}")
        else:
            self.stdout.write("schema: up to date")
        if pending and options["check"]:
            raise CommandError(f"{len(pending)} unapplied migration(s): run manage.py migrate")
