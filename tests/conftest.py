"""Shared test plumbing.

Markers say what a test needs. Without the thing, the test is skipped with a message;
with ``REQUIRE_SERVICES=1`` (CI) a missing thing is a failure, never a silent skip.

- ``@pytest.mark.services("postgres", "redis")``: the real services.
- ``@pytest.mark.browser``: Debian's Chromium and Playwright.
- ``@pytest.mark.opensm``: opensm, ibsim and infiniband-diags.
- ``@pytest.mark.promtool``: Prometheus' ``promtool`` (Debian ``prometheus``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest

REQUIRE = os.environ.get("REQUIRE_SERVICES") == "1"
REDIS_URL = os.environ.get("REDIS_URL", "")
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")


@cache
def _postgres_missing() -> str | None:
    from django.conf import settings

    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        return "PostgreSQL not configured (set DATABASE_URL=postgres://…)"
    return None


@cache
def _redis_missing() -> str | None:
    if not REDIS_URL:
        return "Redis not configured (set REDIS_URL=redis://…)"
    try:
        import redis

        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except Exception as exc:
        return f"Redis at {REDIS_URL} unreachable: {exc}"
    return None


@cache
def _browser_missing() -> str | None:
    if not os.path.exists(CHROMIUM):
        return f"Chromium not found at {CHROMIUM} (apt-get install chromium)"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "playwright not installed"
    return None


@cache
def _opensm_missing() -> str | None:
    for tool in ("ibsim", "opensm", "smpquery", "ibsim-run"):
        if shutil.which(tool) is None and not os.path.exists(f"/usr/sbin/{tool}"):
            return f"{tool} not found (apt-get install opensm ibsim-utils infiniband-diags)"
    return None


@cache
def _promtool_missing() -> str | None:
    if shutil.which("promtool") is None:
        return "promtool not found (apt-get install prometheus)"
    return None


CHECKS = {"postgres": _postgres_missing, "redis": _redis_missing}


def pytest_runtest_setup(item: pytest.Item) -> None:
    problems: list[str] = []
    for marker in item.iter_markers("services"):
        for need in marker.args or ("postgres", "redis"):
            if (why := CHECKS[need]()) is not None:
                problems.append(why)
    if item.get_closest_marker("browser") and (why := _browser_missing()):
        problems.append(why)
    if item.get_closest_marker("opensm") and (why := _opensm_missing()):
        problems.append(why)
    if item.get_closest_marker("promtool") and (why := _promtool_missing()):
        problems.append(why)
    if problems:
        message = "; ".join(dict.fromkeys(problems))
        if REQUIRE:
            pytest.fail(f"REQUIRE_SERVICES=1 but: {message}", pytrace=False)
        pytest.skip(message)


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings: Any) -> None:
    """PBKDF2's real cost is for production; tests hash thousands of passwords."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _fresh_rate_limits() -> None:
    """Rate-limit counters (``throttle_*`` keys, portal/core/throttles.py) live in the cache
    and would outlive a test (a fresh test database reuses user ids): start each test with
    none. Only those keys go — a flush would also hit Celery's and Channels' data."""
    from django.conf import settings
    from django.core.cache import cache

    backend = settings.CACHES["default"]["BACKEND"]
    if backend.endswith("LocMemCache"):
        cache.clear()
    elif backend.endswith("RedisCache") and not _redis_missing():
        client = cache._cache.get_client(write=True)  # type: ignore[attr-defined]
        keys = list(client.scan_iter(match="*throttle_*", count=500))
        if keys:
            client.delete(*keys)


@pytest.fixture(autouse=True)
def _default_language_after_each_test() -> Iterator[None]:
    """A test that activates a language (a page in 中文, a mail composed per recipient) must
    not leave it active for the next test in the same thread."""
    yield
    from django.utils import translation

    translation.deactivate()
