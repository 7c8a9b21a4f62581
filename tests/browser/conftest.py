"""A real stack for the browser tests: ``manage.py demo`` on a temp SQLite file + Chromium.

The demo command migrates, seeds, runs the in-process Celery worker and beat, and serves
the ASGI app (HTTP + WebSockets) with uvicorn. A feeder plays the agents' telemetry.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"
SCREENSHOTS = ARTIFACTS / "screenshots"
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, proc: subprocess.Popen[Any], log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 (loopback)
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"server did not answer {url}:\n{log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("stack")
    ARTIFACTS.mkdir(exist_ok=True)
    port = _free_port()
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp / 'gpupool.sqlite3'}",
           "GPUPOOL_DATA_DIR": str(tmp), "GPUPOOL_SIMULATED_AGENTS": "1",
           "GPUPOOL_RECONCILE_EVERY_S": "1", "GPUPOOL_METER_EVERY_S": "5",
           "REDIS_URL": "", "DEBUG": "0",
           "ALLOWED_HOSTS": "127.0.0.1,localhost", "AXES_ENABLED": "1",
           "PYTHONUNBUFFERED": "1"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    log = ARTIFACTS / "browser-server.log"
    with log.open("w") as out:
        server = subprocess.Popen([sys.executable, "manage.py", "demo", "--port", str(port)],
                                  cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    feeder = None
    try:
        _wait_http(f"http://127.0.0.1:{port}/healthz", server, log)
        with (ARTIFACTS / "browser-feeder.log").open("w") as out:
            feeder = subprocess.Popen([sys.executable, str(Path(__file__).with_name("feeder.py"))],
                                      cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                      start_new_session=True)
        yield f"http://127.0.0.1:{port}"
    finally:
        if feeder is not None:
            _stop(feeder)
        _stop(server)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Module scope: Playwright's sync API keeps an event loop running in this thread until
    it exits, which would break every later test that runs asyncio in the main thread."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                     headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")
    context.set_default_timeout(30_000)
    pg = context.new_page()
    yield pg
    context.close()


def shot(page: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def publish(names: list[str]) -> None:
    """Copy a few screenshots into docs/ for the README (only when asked: keeps runs clean).

    ``GPUPOOL_PUBLISH_SCREENSHOTS=1 pytest tests/browser`` refreshes docs/screenshots/.
    """
    if os.environ.get("GPUPOOL_PUBLISH_SCREENSHOTS") != "1":
        return
    docs = ROOT / "docs" / "screenshots"
    docs.mkdir(parents=True, exist_ok=True)
    for name in names:
        src = SCREENSHOTS / f"{name}.png"
        if src.exists():
            shutil.copy(src, docs / src.name)
