"""Redis is broker, channel layer and cache only: losing it loses nothing, and a rate limit
kept there never turns an order or an agent report into a 500 (seen in the crash harness:
orders answered 500 while Redis restarted)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.cache import caches
from rest_framework.test import APIClient

from portal.core.throttles import PortalThrottle
from portal.fleet.api import throttle as agent_throttle


class _Down:
    def get(self, *a: Any, **k: Any) -> Any:
        raise ConnectionError("redis is restarting")

    set = add = incr = delete = get


@pytest.fixture
def cache_down(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(PortalThrottle, "cache", _Down())
    monkeypatch.setattr(agent_throttle, "caches", {"default": _Down()})


def test_rate_limit_fails_open_when_redis_is_down(cache_down: None, db: Any,
                                                   rf: Any) -> None:
    request = rf.post("/api/v1/orders")
    request.resolver_match = type("M", (), {"url_name": "order-create"})()
    request.user = AnonymousUser()
    assert PortalThrottle().allow_request(request, object()) is True


def test_agent_rate_limit_fails_open_when_redis_is_down(cache_down: None,
                                                         settings: Any) -> None:
    settings.GPUPOOL_AGENT_RATE_LIMIT = {"enabled": True, "rate_per_s": 0.001, "burst": 1}
    for _ in range(3):  # would be 429 from the second call on with a working cache
        agent_throttle.throttle(scope="report", secret="gpn_x")


def test_login_page_answers_while_redis_is_down(cache_down: None, db: Any) -> None:
    response = APIClient().post("/accounts/login/", {"username": "x", "password": "y"})
    assert response.status_code < 500
    assert caches["default"] is not None
