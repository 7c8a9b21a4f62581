from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from portal.billing.exports import WRITERS, export, parse_day
from portal.core.errors import ApplicationError
from portal.tenants.models import Tenant


class Command(BaseCommand):
    help = ("Write usage lines (csv) or FinOps FOCUS rows (focus-csv, focus-jsonl) of "
            "[--from, --to] (inclusive days, UTC) to stdout.")

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--format", choices=sorted(WRITERS), default="csv")
        parser.add_argument("--tenant", help="tenant slug (default: all tenants)")
        parser.add_argument("--from", dest="start", required=True, help="YYYY-MM-DD")
        parser.add_argument("--to", dest="end", required=True, help="YYYY-MM-DD (inclusive)")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = None
        if options["tenant"]:
            tenant = Tenant.objects.filter(slug=options["tenant"]).first()
            if tenant is None:
                raise CommandError(f"no tenant {options['tenant']!r}")
        try:
            start = parse_day(options["start"], "from")
            end = parse_day(options["end"], "to") + timedelta(days=1)
            chunks = export(options["format"], tenant=tenant, start=start, end=end)
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        write = self.stdout._out.write  # raw stream: no per-line ending added
        for chunk in chunks:
            write(chunk)
        self.stdout.flush()
