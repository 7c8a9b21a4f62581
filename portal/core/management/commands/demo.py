from __future__ import annotations

import os
from typing import Any

import uvicorn
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from portal.core import demo


class Command(BaseCommand):
    help = "Run the whole stack in one process tree: migrate, seed, worker, ASGI server."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--no-serve", action="store_true", help="migrate and seed only")

    def handle(self, *args: Any, **opts: Any) -> None:
        call_command("migrate", verbosity=0, interactive=False)
        created = demo.seed()
        self.stdout.write("demo data created" if created else "demo data already present")
        if opts["no_serve"]:
            return
        if not settings.REDIS_URL:
            from portal.core.inprocess import start_beat_thread, start_worker_thread

            start_worker_thread()
            start_beat_thread()
        url = f"http://{opts['host']}:{opts['port']}/"
        logins = ", ".join(u for u, _, _ in demo.DEMO_USERS)
        self.stdout.write(self.style.SUCCESS(
            f"\n  gpupool demo: {url}\n  API docs:     {url}api/docs/\n"
            f"  logins:       {logins} (password: {demo.DEMO_PASSWORD})\n"))
        uvicorn.run("portal.asgi:application", host=opts["host"], port=opts["port"],
                    log_level="info", lifespan="off")
