from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import uvicorn
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from portal.web import demo


class Command(BaseCommand):
    help = "Run the whole stack in one process tree: migrate, seed, worker, ASGI server."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--no-serve", action="store_true", help="migrate and seed only")
        parser.add_argument("--verbose", action="store_true",
                            help="Celery at INFO, the access log and e-mails on the console")

    def handle(self, *args: Any, **opts: Any) -> None:
        call_command("migrate", verbosity=0, interactive=False)
        created = demo.seed()
        self.stdout.write("demo data created" if created else "demo data already present")
        if opts["no_serve"]:
            return
        mail_dir = None if opts["verbose"] else Path(settings.DATA_DIR) / "demo-mail"
        demo.configure_output(verbose=opts["verbose"], mail_dir=mail_dir or Path())
        if not settings.REDIS_URL:
            from portal.core.inprocess import start_beat_thread, start_worker_thread

            start_worker_thread()
            start_beat_thread()
        url = f"http://{opts['host']}:{opts['port']}/"
        config = uvicorn.Config("portal.asgi:application", host=opts["host"],
                                port=opts["port"], lifespan="off",
                                log_level="info" if opts["verbose"] else "warning")
        server = uvicorn.Server(config)
        demo.announce_when_started(server, lambda text: self.stdout.write(
            self.style.SUCCESS(text)), demo.banner(url, mail_dir))
        server.run()
