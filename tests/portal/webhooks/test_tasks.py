from __future__ import annotations

from portal.celery import app
from portal.webhooks import services, tasks


def test_the_names_sent_are_registered_durable_tasks() -> None:
    app.loader.import_default_modules()
    for name in (services.DELIVER, tasks.SWEEP):
        task = app.tasks[name]
        assert task.acks_late and task.reject_on_worker_lost
