from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from portal.core.errors import ApplicationError
from portal.fleet.services.enrolment import bootstrap_token_create


class Command(BaseCommand):
    help = ("Issue one-time agent bootstrap tokens (printed once, stored hashed): "
            "agent_token create --hostname NAME|PATTERN [--role node|fabric] "
            "[--ttl-hours 24] [--count N] [--reenrol]")

    def add_arguments(self, parser: Any) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="issue token(s), one per line on stdout")
        create.add_argument("--hostname", required=True,
                            help="the host(s) it may enrol: a name or an fnmatch pattern "
                                 "(gpu-node-*); matched case-insensitively")
        create.add_argument("--reenrol", action="store_true",
                            help="it may replace an enrolled agent's identity without "
                                 "approval (a planned reinstall)")
        create.add_argument("--role", choices=["node", "fabric"], default="node")
        create.add_argument("--ttl-hours", type=float, default=24.0)
        create.add_argument("--count", type=int, default=1)
        create.add_argument("--note", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["ttl_hours"] <= 0 or options["count"] < 1:
            raise CommandError("--ttl-hours must be > 0 and --count >= 1")
        for _ in range(options["count"]):
            try:
                _, raw = bootstrap_token_create(actor=None, role=options["role"],
                                                hostname=options["hostname"],
                                                allow_reenrol=options["reenrol"],
                                                ttl_hours=options["ttl_hours"],
                                                note=options["note"])
            except ApplicationError as exc:
                raise CommandError(exc.message) from exc
            self.stdout.write(raw)
