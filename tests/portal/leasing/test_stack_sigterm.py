"""Regression: ``timeout`` (SIGTERM) on ``tests.bench.lease_latency`` left its live stack
running (uvicorn, Celery, the simulator, a private redis-server): SIGTERM killed the
harness without unwinding ``with Stack``. Now SIGTERM raises SystemExit inside it."""

from __future__ import annotations

import os
import signal

import pytest

from tests.portal.leasing.stack import _exit_on_sigterm


def test_sigterm_unwinds_the_stack_block() -> None:
    previous = _exit_on_sigterm()
    closed: list[bool] = []

    def stack_block() -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        finally:
            closed.append(True)  # what Stack.__exit__ does: close every process

    try:
        with pytest.raises(SystemExit) as stopped:
            stack_block()
        assert stopped.value.code == 128 + signal.SIGTERM
        assert closed == [True]
    finally:
        signal.signal(signal.SIGTERM, previous)
