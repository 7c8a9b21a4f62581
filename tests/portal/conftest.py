from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _stop_desired_wakeup_listener() -> Iterator[None]:
    """A long-poll starts the process's LISTEN connection (portal/fleet/wakeup.py); it
    must be gone before the test database is dropped."""
    yield
    from portal.fleet import wakeup

    if wakeup.HUB.running():
        wakeup.stop()
