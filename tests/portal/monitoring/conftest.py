"""Shared fixtures (tests/portal/driving.py), made visible to this directory's tests: the
end-to-end order → active test drives the reconciler with on-commit hooks run."""

from __future__ import annotations

from tests.portal import driving

frozen_clock = driving.frozen_clock
run_on_commit = driving.run_on_commit
