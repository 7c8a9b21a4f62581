"""The debt ADR 0009 listed stays paid (issue 12): leasing imports nothing of billing
(billing reads leasing's models; quotes get their price from billing at start-up), and the
intra-portal contracts hold without a single ignored import."""

from __future__ import annotations

import configparser
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[3]


def test_leasing_imports_nothing_of_billing() -> None:
    graph = grimp.build_graph("portal")
    assert not graph.chain_exists(importer="portal.leasing", imported="portal.billing",
                                  as_packages=True)


def test_quotes_are_priced_by_billing_connected_at_start_up() -> None:
    from portal.billing import pricing
    from portal.leasing import quoting

    assert quoting._pricing() is pricing


def test_the_ratchet_alerts_on_a_paid_off_ignore() -> None:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    for name in ("portal-apps-acyclic", "app-layers"):
        section = config[f"importlinter:contract:{name}"]
        ignores = section.get("ignore_imports", "").split()
        if ignores:
            assert section["unmatched_ignore_imports_alerting"] == "error", name
    for name in ("portal-apps-acyclic", "app-layers"):  # the debt is paid: no ignores
        assert not config[f"importlinter:contract:{name}"].get("ignore_imports", "").split()
