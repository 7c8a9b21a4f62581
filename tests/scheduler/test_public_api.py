"""The core's public API (its layering is checked by import-linter: tests/test_layering.py)."""

import scheduler


def test_public_api_is_exported():
    for name in ("Snapshot", "Request", "schedule_pass", "quote", "check_extension",
                 "Placement", "Unplaceable", "Reason", "get_policy"):
        assert name in scheduler.__all__
    assert scheduler.get_policy("bestfit").name == "bestfit"
    assert scheduler.get_policy().name == scheduler.DEFAULT_POLICY
