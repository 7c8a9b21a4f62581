"""Celery's queue depth, read from the broker (Redis ``LLEN``), never through Celery: a
scrape must not wait on, or fail with, a broker that is gone (1 s timeouts; ``up`` 0)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.conf import settings

log = logging.getLogger(__name__)

TIMEOUT_S = 1.0
# kombu's Redis transport: a hash of the messages delivered to a worker and not yet acked
UNACKED_KEY = "unacked"


@dataclass(frozen=True)
class BrokerDepth:
    redis: bool  # the broker is Redis (else nothing here is measured)
    up: bool
    queues: dict[str, int] = field(default_factory=dict)
    unacked: int = 0


def queue_names() -> list[str]:
    """The queues workers consume: Celery's default and any configured ones."""
    names = {str(getattr(settings, "CELERY_TASK_DEFAULT_QUEUE", "") or "celery")}
    for queue in getattr(settings, "CELERY_TASK_QUEUES", None) or ():
        names.add(str(getattr(queue, "name", queue)))
    return sorted(names)


def depth() -> BrokerDepth:
    url = str(getattr(settings, "CELERY_BROKER_URL", ""))
    if not url.startswith(("redis://", "rediss://", "unix://")):
        return BrokerDepth(redis=False, up=False)
    import redis

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=TIMEOUT_S,
                                      socket_timeout=TIMEOUT_S)
        with client.pipeline(transaction=False) as pipe:
            names = queue_names()
            for name in names:
                pipe.llen(name)
            pipe.hlen(UNACKED_KEY)
            *lengths, unacked = pipe.execute()
    except redis.RedisError as exc:
        log.warning("metrics: Celery broker unreadable (%s)", exc)
        return BrokerDepth(redis=True, up=False)
    return BrokerDepth(redis=True, up=True, queues=dict(zip(names, map(int, lengths),
                                                            strict=True)),
                       unacked=int(unacked))
