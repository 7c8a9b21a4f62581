"""The scheduler core is pure Python: its tests need no Django.

The repository-wide ``tests/conftest.py`` has Django-only autouse fixtures; they are
overridden here with no-ops so that ``pytest tests/scheduler -p no:django`` runs.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _fast_password_hashing() -> None:
    """No passwords here (overrides the Django settings fixture of tests/conftest.py)."""
