"""The agent API's 429: a per-credential token bucket in the cache, answered with
``Retry-After`` before any database work; the defaults never throttle a normal fleet."""

from __future__ import annotations

from typing import Any

import pytest

from portal.fleet.api import throttle
from portal.fleet.models import AgentReport
from tests.portal.fleet.conftest import AgentClient
from tests.portal.fleet.helpers import report

TIGHT = {"rate_per_s": 0.1, "burst": 3, "enrol_rate_per_s": 0.1, "enrol_burst": 2}


def _hammer(agent: AgentClient, other: AgentClient) -> None:
    assert agent.enrol("gpu-node-01").status_code == 201
    assert other.enrol("gpu-node-02").status_code == 201
    codes = [agent.report(report(agent.node_id, seq)).status_code for seq in range(1, 6)]
    assert codes == [200, 200, 200, 429, 429]
    resp = agent.report(report(agent.node_id, 9))
    assert resp.json()["error"]["code"] == "rate_limited"
    assert 5 <= int(resp["Retry-After"]) <= 10  # the next token, in whole seconds
    assert not AgentReport.objects.filter(seq__gte=4).exists()  # refused before storing
    assert agent.desired(after=0).status_code == 429  # the same bucket for every endpoint
    assert other.report(report(other.node_id, 1)).status_code == 200  # its own bucket


@pytest.mark.services("redis")
@pytest.mark.django_db
def test_agent_api_answers_429_with_retry_after(agent_client: AgentClient,
                                                other_agent: AgentClient,
                                                settings: Any) -> None:
    from django.core.cache import caches
    from django.core.cache.backends.redis import RedisCache

    assert isinstance(caches["default"], RedisCache)  # the atomic (Lua) path
    settings.GPUPOOL_AGENT_RATE_LIMIT = TIGHT
    _hammer(agent_client, other_agent)


@pytest.mark.django_db
def test_agent_api_answers_429_with_a_local_cache(agent_client: AgentClient,
                                                  other_agent: AgentClient,
                                                  settings: Any) -> None:
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": "throttle-test"}}
    settings.GPUPOOL_AGENT_RATE_LIMIT = TIGHT
    _hammer(agent_client, other_agent)


@pytest.mark.django_db
def test_enrolment_is_rate_limited_per_bootstrap_token(other_agent: AgentClient,
                                                       settings: Any) -> None:
    from portal.fleet.services.enrolment import bootstrap_token_create

    settings.GPUPOOL_AGENT_RATE_LIMIT = TIGHT
    _, token = bootstrap_token_create(actor=None, hostname="gpu-node-01")
    codes = [other_agent.enrol("gpu-node-99", token=token).status_code for _ in range(3)]
    assert codes == [403, 403, 429]


@pytest.mark.services("redis")
def test_default_rate_limit_never_throttles_agents_reporting_every_10s(settings: Any) -> None:
    """20 agents for 10 minutes at the protocol's pace (a report every 10 s, a desired
    fetch after each ack, a long-poll answered every 30 s), then a spool resend of 150
    reports back to back: no request of the default bucket is refused."""
    settings.GPUPOOL_AGENT_RATE_LIMIT = {}
    cfg = throttle.DEFAULTS
    interval, burst = 1 / cfg["rate_per_s"], cfg["burst"]
    start = 1_900_000_000.0 + hash(object()) % 1000
    refused = 0
    for agent in range(20):
        key = f"test-fleet:{start}:{agent}"
        for tick in range(0, 600, 10):
            now = start + tick + agent * 0.01
            requests = 3 if tick % 30 == 0 else 2
            refused += sum(throttle._take(key, interval, burst, now) > 0
                           for _ in range(requests))
        now = start + 600
        refused += sum(throttle._take(key, interval, burst, now + i / 1000) > 0
                       for i in range(150))
    assert refused == 0


@pytest.mark.services("redis")
def test_rate_limit_reuses_one_redis_connection_across_requests() -> None:
    """Finding (simscale, issue 12): each agent request runs in a fresh asyncio context
    whose ``caches["default"]`` is a new RedisCache with an empty pool, so every request
    opened a TCP connection to Redis to take its token (28 % of the agent API's thread
    time at 150 nodes). Twenty requests now share one connection."""
    import asyncio
    import contextvars
    from concurrent.futures import ThreadPoolExecutor

    import redis.connection
    from asgiref.sync import sync_to_async

    connects = []
    original = redis.connection.Connection._connect

    def counted(self: Any) -> Any:  # a new socket (``connect`` is called on every use)
        connects.append(1)
        return original(self)

    pool = ThreadPoolExecutor(2)

    async def requests() -> None:
        for i in range(20):  # each request a task in a fresh context (as uvicorn runs it),
            call = sync_to_async(throttle.throttle, thread_sensitive=False, executor=pool)
            await asyncio.create_task(call(scope="agent", secret=f"gpn_reuse_{i % 3}"),
                                      context=contextvars.Context())  # dbthread.py's way

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(redis.connection.Connection, "_connect", counted)
        asyncio.run(requests())
    pool.shutdown()
    assert len(connects) <= 2  # one per thread at most (was 20: one per request)
