"""Per-credential rate limit of the agent API: a token bucket (GCRA) in the cache.

``GPUPOOL_AGENT_RATE_LIMIT`` (a dict, every key optional) sets it:

- ``rate_per_s`` / ``burst``: each agent credential (the bearer value) may make ``burst``
  requests at once and ``rate_per_s`` sustained (defaults 20 and 200: an agent reports
  every 10 s and holds one long-poll, about 0.2 requests/s; a spool resend after an
  outage drains at 20 reports/s);
- ``enrol_rate_per_s`` / ``enrol_burst``: the same per bootstrap token (0.5 and 20);
- ``enabled``: ``False`` turns the limit off.

A refused request is answered ``429 rate_limited`` with ``Retry-After`` (whole seconds)
before any database work. With Redis (production) one Lua script reads and writes the
bucket atomically; with another cache backend (tests without Redis) a get/set pair does,
which may let a few extra requests through under a race. A cache that cannot be reached
(Redis restarting) lets the request through, logged: the limit guards the database, and
an agent's reports and long-poll must not fail with a 500 while Redis is away (found by
the black-box harness, tests/security/blackbox.py).
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from typing import Any

from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache
from redis.commands.core import Script
from redis.exceptions import RedisError

from portal.fleet.errors import AgentError

log = logging.getLogger(__name__)
DEFAULTS: dict[str, Any] = {"enabled": True, "rate_per_s": 20.0, "burst": 200,
                            "enrol_rate_per_s": 0.5, "enrol_burst": 20}
_GCRA = """
local now, interval, burst = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or ARGV[1])
if tat < now then tat = now end
local wait = tat + interval - burst * interval - now
if wait > 0 then return tostring(wait) end
redis.call('SET', KEYS[1], tostring(tat + interval), 'PX',
           math.ceil((tat + interval - now) * 1000) + 1000)
return '0'
"""


log = logging.getLogger(__name__)


def _config() -> dict[str, Any]:
    return {**DEFAULTS, **getattr(settings, "GPUPOOL_AGENT_RATE_LIMIT", {})}


def throttle(*, scope: str, secret: str) -> None:
    """Take one token from the bucket of ``secret`` (a credential or bootstrap token,
    only its hash is used) or raise ``AgentError("rate_limited")``."""
    config = _config()
    if not config["enabled"] or not secret:
        return
    prefix = "enrol_" if scope == "enrol" else ""
    rate, burst = float(config[f"{prefix}rate_per_s"]), int(config[f"{prefix}burst"])
    if rate <= 0:
        return
    key = f"gpupool:agent-rl:{scope}:{hashlib.sha256(secret.encode()).hexdigest()[:32]}"
    try:
        wait = _take(key, 1.0 / rate, max(1, burst), time.time())
    except (RedisError, OSError) as exc:  # fail open: see the module docstring
        log.warning("agent rate limit skipped, cache unreachable: %s", exc)
        return
    if wait > 0:
        retry = max(1, math.ceil(wait))
        raise AgentError("rate_limited", f"too many requests; retry in {retry} s",
                         retry_after=retry)


_SCRIPTS: dict[str, Script] = {}


def _script(backend: RedisCache) -> Script:
    """The bucket script, made once per process and server list, bound to one Redis client
    (one connection pool). Django's cache handler gives every asyncio context its own
    ``RedisCache`` whose pool starts empty: keyed by the backend object, each agent request
    opened a new TCP connection to Redis (and said HELLO) just to take a token. The script
    is sent by its SHA (``EVALSHA``, loaded again by redis-py if the server lost it)."""
    key = repr(backend._servers)
    script = _SCRIPTS.get(key)
    if script is None:
        script = backend._cache.get_client(None, write=True).register_script(_GCRA)
        _SCRIPTS[key] = script
    return script


def _take(key: str, interval: float, burst: int, now: float) -> float:
    """Seconds until a token is free (0: taken now)."""
    backend = caches["default"]
    if isinstance(backend, RedisCache):
        full_key = backend.make_and_validate_key(key)
        return float(_script(backend)(keys=[full_key], args=[repr(now), repr(interval), burst]))
    tat = max(float(backend.get(key) or now), now)
    wait = tat + interval - burst * interval - now
    if wait > 0:
        return wait
    backend.set(key, tat + interval, timeout=math.ceil(tat + interval - now) + 1)
    return 0.0
