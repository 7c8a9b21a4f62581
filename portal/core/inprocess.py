"""An in-process Celery worker for the demo (in-memory transport, no Redis).

The kombu ``memory://`` transport only works inside one process, so the demo runs the
worker in a thread beside the ASGI server. Production runs real worker processes.
"""

from __future__ import annotations

import logging
import threading

from celery.worker import WorkController

from portal.celery import app

log = logging.getLogger(__name__)


def start_worker_thread() -> threading.Thread:
    worker = WorkController(app=app, pool_cls="solo", concurrency=1, hostname="demo@localhost",
                            without_heartbeat=True, without_mingle=True, without_gossip=True,
                            loglevel="INFO")
    thread = threading.Thread(target=worker.start, name="celery-inprocess", daemon=True)
    thread.start()
    log.info("in-process Celery worker started (broker %s)", app.conf.broker_url)
    return thread


def start_beat_thread() -> threading.Thread:
    """A tiny beat for the demo: enqueue each periodic task on its own interval."""
    import time

    from django.conf import settings

    schedule = {name: float(entry["schedule"])
                for name, entry in settings.CELERY_BEAT_SCHEDULE.items()}
    due = dict.fromkeys(schedule, time.monotonic() + 1.0)

    def loop() -> None:
        while True:
            time.sleep(0.5)
            now = time.monotonic()
            for name, entry in settings.CELERY_BEAT_SCHEDULE.items():
                if now < due[name]:
                    continue
                due[name] = now + schedule[name]
                try:
                    app.send_task(entry["task"], **entry.get("options", {}))
                except Exception:
                    log.exception("demo beat could not enqueue %s", entry["task"])

    thread = threading.Thread(target=loop, name="celery-beat-inprocess", daemon=True)
    thread.start()
    return thread
