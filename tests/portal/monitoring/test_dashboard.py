"""The Grafana dashboard (docs/deploy/grafana/gpupool.json) and the alert rules use only
series the portal's real /metrics exposes, and every dashboard query is valid PromQL
(``promtool check rules`` on a rule file made of them)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.portal.monitoring import conditions as cond
from tests.portal.monitoring.test_alert_rules import RULES, promtool

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "docs" / "deploy" / "grafana" / "gpupool.json"
SERIES = re.compile(r"\b(gpupool_[a-z_]+)")


def _queries() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    return [t["expr"] for panel in doc["panels"] for t in panel["targets"]]


@pytest.mark.django_db
@pytest.mark.services("postgres", "redis")
def test_dashboard_and_rules_use_only_exposed_series(settings: Any) -> None:
    settings.GPUPOOL_METRICS_TOKEN = cond.TOKEN
    cond.own_queue(settings)
    cond.troubled()
    exposed = {name for name, _ in cond.samples(cond.scrape_text())}
    cond.clear_broker()
    used = set(SERIES.findall(" ".join(_queries()))) | set(SERIES.findall(RULES.read_text()))
    assert used, "no gpupool series found"
    assert sorted(used - exposed) == []
    # every panel of the dashboard draws something
    assert all(panel["targets"] for panel in json.loads(DASHBOARD.read_text())["panels"])


@pytest.mark.promtool
def test_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    rules = [{"record": f"gpupool:dashboard_query_{i}",
              "expr": q.replace("$__rate_interval", "5m")} for i, q in enumerate(_queries())]
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
