from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from portal.billing.metering import meter_leases
from portal.core import clock


class Command(BaseCommand):
    help = "Meter lease usage up to now (or --until); idempotent, safe to rerun after a crash."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--until", help="ISO 8601 UTC instant (default: now)")
        parser.add_argument("--pause", type=float, default=0.0,
                            help="seconds to wait between leases (spreads database load)")

    def handle(self, *args: Any, **options: Any) -> None:
        until = clock.now()
        if options["until"]:
            try:
                until = datetime.fromisoformat(options["until"].replace("Z", "+00:00"))
            except ValueError as exc:
                raise CommandError(f"--until: {exc}") from exc
            if until.tzinfo is None:
                raise CommandError("--until must carry a timezone (e.g. Z)")
        report = meter_leases(until=until, pause=options["pause"])
        self.stdout.write(" ".join(f"{k}={v}" for k, v in report.as_dict().items()))
