"""``manage.py restore_check``: the invariants a restored database must hold (exit 1 when
one does not; see portal/leasing/integrity.py and docs/operations.md)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from portal.leasing import integrity


class Command(BaseCommand):
    help = "Check the invariants of a (restored) database: exit 1 when one does not hold."

    def handle(self, *args: Any, **options: Any) -> None:
        if connection.vendor != "postgresql":
            raise CommandError("restore_check needs PostgreSQL (the production database)")
        failed = 0
        for name, problems in integrity.run().items():
            if problems:
                failed += 1
                self.stdout.write(f"FAIL {name}")
                for problem in problems:
                    self.stdout.write(f"     {problem}")
            else:
                self.stdout.write(f"ok   {name}")
        if failed:
            raise CommandError(f"{failed} invariant(s) do not hold")
