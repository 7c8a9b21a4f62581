"""The harness builds a URL for every row of the credential table (tests/portal/
credential_table.py): a route kind it does not know would only show up as a failed world
seed inside the slow live-stack run (seen in CI after the console's member routes came)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tests.portal import credential_table as table
from tests.security import blackbox_world


def test_the_harness_world_knows_every_url_kind_of_the_table(monkeypatch: Any) -> None:
    kinds = {case[1] for cases in table.ROUTES.values() for case in cases}
    thing = SimpleNamespace(pk=1)
    world = {k: thing for k in ("membership", "invitation", "apikey", "audit", "lease", "ssh",
                                "admin_key", "webhook", "webhook_message")}
    world["users"] = {"admin": thing}

    class _None:
        @staticmethod
        def order_by(*_: Any) -> Any:
            return SimpleNamespace(first=lambda: None,
                                   values_list=lambda *a, **k: SimpleNamespace(first=lambda: 1))

    import portal.inventory.models as inventory
    monkeypatch.setattr(inventory.Node, "objects", _None)
    monkeypatch.setattr(inventory.Gpu, "objects", _None)
    unknown = set()
    for kind in sorted(kinds):
        try:
            blackbox_world._kwargs(kind, world)
        except KeyError:
            unknown.add(kind)
    assert unknown == set()
