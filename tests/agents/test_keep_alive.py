"""An agent keeps its HTTP connection between reports (protocol §1, connections).

Regression: ``test_reports_10_s_apart_reuse_one_connection``. With httpx's default
``keepalive_expiry`` (5 s) the agent's client dropped its idle connection before every
10 s report, and uvicorn's default ``--timeout-keep-alive`` (5 s) did the same on the
server: each report paid a TCP connect and accept on both sides. Real sockets here (a
stdlib HTTP/1.1 server that counts connections); the idle gap between two reports is
made by advancing the clock httpcore reads, not by sleeping.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import httpcore._sync.http11 as http11
import pytest

from agents import protocol
from agents.client.portal import PortalClient


class _CountingHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    connections = 0

    def setup(self) -> None:
        super().setup()
        type(self).connections += 1

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"protocol": 1, "seq": 1, "status": "accepted",
                           "desired_generation": 0, "rotate_credential": False}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, type[_CountingHandler]]]:
    handler = type("Handler", (_CountingHandler,), {"connections": 0})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def idle_clock(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """The monotonic clock httpcore's HTTP/1.1 connections expire by, plus ``skew``."""
    clock = SimpleNamespace(skew=0.0)
    fake_time = SimpleNamespace(monotonic=lambda: time.monotonic() + clock.skew)
    monkeypatch.setattr(http11, "time", fake_time)
    return clock


def _client(url: str) -> PortalClient:
    from agents.client.portal import Credential

    return PortalClient(url, credential=Credential(node_id="n1", credential="gpn_x"))


def test_reports_10_s_apart_reuse_one_connection(server: Any, idle_clock: Any) -> None:
    url, handler = server
    client = _client(url)
    try:
        client.send_report({"protocol": 1, "seq": 1})
        idle_clock.skew += 10.0  # the shortest report interval the portal gives
        client.send_report({"protocol": 1, "seq": 2})
    finally:
        client.close()
    assert handler.connections == 1


def test_a_connection_idle_past_the_client_keep_alive_is_replaced(server: Any,
                                                                  idle_clock: Any) -> None:
    url, handler = server
    client = _client(url)
    try:
        client.send_report({"protocol": 1, "seq": 1})
        idle_clock.skew += protocol.CLIENT_KEEP_ALIVE_S + 1
        client.send_report({"protocol": 1, "seq": 2})
    finally:
        client.close()
    assert handler.connections == 2  # the client closed it first, as §1 says


def test_the_client_closes_before_the_server_does() -> None:
    assert 10 < protocol.CLIENT_KEEP_ALIVE_S < protocol.SERVER_KEEP_ALIVE_S
