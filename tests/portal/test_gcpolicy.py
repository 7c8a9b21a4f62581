"""The start-up heap is frozen out of the garbage collector's passes (ADR 0172); the
scheduler caches, which are rebuilt, never are."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from portal.core import gcpolicy
from portal.leasing import warmup

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fresh_process_state(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Iterator[None]:
    """As if this process had not frozen yet; the collector's state put back after."""
    monkeypatch.setattr(gcpolicy, "_frozen_in", set())
    monkeypatch.setattr(warmup, "_warmed_in", set())
    settings.GPUPOOL_GC_FREEZE = True
    yield
    gc.unfreeze()


def test_freeze_startup_heap_freezes_what_is_alive_once_per_process(
        fresh_process_state: None) -> None:
    frozen = gcpolicy.freeze_startup_heap()
    assert frozen > 10_000  # this test process imported Django and the portal
    assert gc.get_freeze_count() > frozen * 0.99  # (refcounting may free a few of them)
    assert gcpolicy.freeze_startup_heap() == 0  # once per process


def test_gc_freeze_off(fresh_process_state: None, settings: Any) -> None:
    settings.GPUPOOL_GC_FREEZE = False
    before = gc.get_freeze_count()
    assert gcpolicy.freeze_startup_heap() == 0
    assert gc.get_freeze_count() == before


def test_worker_freezes_before_it_warms_the_caches(fresh_process_state: None,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A rebuilt cache must stay collectable: frozen objects are never collected."""
    seen: dict[str, int] = {}

    def warm() -> float:
        seen["frozen when warming"] = gc.get_freeze_count()
        seen["cache"] = id([object() for _ in range(1000)])
        return 0.0

    monkeypatch.setattr(warmup, "warm_scheduler_caches", warm)
    warmup._once()
    assert seen["frozen when warming"] > 10_000
    assert gc.get_freeze_count() <= seen["frozen when warming"]  # nothing frozen after


@pytest.mark.parametrize(("setting", "frozen"), [("1", True), ("0", False)])
def test_web_process_freezes_its_imports(setting: str, frozen: bool) -> None:
    """``portal.asgi`` (what uvicorn imports) freezes the imported portal, views included."""
    code = ("import gc, sys; import portal.asgi; "
            "print(gc.get_freeze_count(), 'portal.urls' in sys.modules)")
    env = {**os.environ, "GPUPOOL_GC_FREEZE": setting, "GPUPOOL_WARM_WEB": "0",
           "DJANGO_SETTINGS_MODULE": "portal.settings"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, text=True,
                         capture_output=True, timeout=120, check=True).stdout.split()
    assert (int(out[0]) > 50_000) is frozen
    assert out[1] == "True"
