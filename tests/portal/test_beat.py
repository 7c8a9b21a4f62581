from django.conf import settings

from portal.celery import app


def test_every_beat_entry_names_a_registered_task() -> None:
    app.loader.import_default_modules()
    missing = [e["task"] for e in settings.CELERY_BEAT_SCHEDULE.values()
               if e["task"] not in app.tasks]
    assert missing == []


def test_celery_delivery_settings_are_at_least_once() -> None:
    assert app.conf.task_acks_late is True
    assert app.conf.task_reject_on_worker_lost is True
    assert app.conf.worker_prefetch_multiplier == 1
    timeout = app.conf.broker_transport_options.get("visibility_timeout")
    if settings.REDIS_URL:
        assert timeout and timeout > app.conf.task_time_limit
