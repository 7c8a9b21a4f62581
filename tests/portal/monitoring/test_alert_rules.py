"""The example alert rules (docs/deploy/prometheus/gpupool-alerts.yml) load in ``promtool
check rules`` and fire on the conditions they describe: ``promtool test rules`` on input
series made from the portal's real ``/metrics`` output, scraped with each condition set up
in the database (issue 31 acceptance). A quiet hour before each condition must fire
nothing; a rule whose threshold cannot be met must make the rule test fail."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from kombu import Queue
from prometheus_client.parser import text_string_to_metric_families

from portal.monitoring import selectors
from tests.portal.monitoring import conditions as cond

pytestmark = [pytest.mark.django_db, pytest.mark.services("postgres", "redis"),
              pytest.mark.promtool]

ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "docs" / "deploy" / "prometheus" / "gpupool-alerts.yml"
TARGET = {"job": "gpupool-portal", "instance": "portal-1:8000"}
QUIET = 420  # minutes of the quiet state first (the repair rule looks 6 h back)
TROUBLE = 90  # minutes of the condition: every rule's window + its ``for``
Key = tuple[str, tuple[tuple[str, str], ...]]


def _parse(text: str) -> tuple[dict[Key, float], set[str]]:
    """Samples, and the names of cumulative series (a real histogram's, a counter's)."""
    values: dict[Key, float] = {}
    cumulative: set[str] = set()
    for family in text_string_to_metric_families(text):
        names = {s.name for s in family.samples}
        counting = family.type == "counter" or (
            family.type == "histogram" and f"{family.name}_count" in names)
        for s in family.samples:
            values[(s.name, tuple(sorted({**s.labels, **TARGET}.items())))] = s.value
            if counting:
                cumulative.add(s.name)
    return values, cumulative


def _selector(key: Key) -> str:
    name, labels = key
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"


def input_series(quiet: str, trouble: str | None) -> list[dict[str, str]]:
    """One minute per sample: the quiet scrape for ``QUIET`` minutes, then the troubled
    one (``None``: the portal is down, its series go stale). Gauges hold their scraped
    value; a cumulative series grows each minute by what the scrape counted — in the
    quiet phase the quiet scrape's counts, then the difference between the two scrapes
    (what happened between them; 0: nothing happened, e.g. no scheduling pass)."""
    q, counting = _parse(quiet)
    t, more = _parse(trouble) if trouble is not None else ({}, set())
    counting |= more
    out = []
    for key in sorted(q.keys() | t.keys()):
        qv, tv = q.get(key), t.get(key)
        if key[0] in counting:
            step = qv or 0.0
            top = step * QUIET
            later = f"{top}+{max((tv or 0.0) - (qv or 0.0), 0.0)}x{TROUBLE - 1}" \
                if tv is not None else f"_x{TROUBLE - 1}"
            values = f"0+{step}x{QUIET - 1} {later}"
        else:
            first = "_" if qv is None else qv
            second = "_" if tv is None else tv
            values = f"{first}x{QUIET - 1} {second}x{TROUBLE - 1}"
        out.append({"series": _selector(key), "values": values})
    up = "1" if trouble is not None else "0"
    out.append({"series": _selector(("up", tuple(sorted(TARGET.items())))),
                "values": f"1x{QUIET - 1} {up}x{TROUBLE - 1}"})
    return out


def _rules() -> dict[str, dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return {r["alert"]: r for g in doc["groups"] for r in g["rules"]}


def _expected(firing: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
    """Every rule, evaluated at the end of the quiet phase (none fires) and at the end of
    the condition (those in ``firing`` fire, with these extra labels; the others not)."""
    rules = _rules()
    assert set(firing) <= set(rules), set(firing) - set(rules)
    checks: list[dict[str, Any]] = []
    for name, rule in sorted(rules.items()):
        checks.append({"eval_time": f"{QUIET - 1}m", "alertname": name, "exp_alerts": []})
        alerts = [] if name not in firing else [{
            "exp_labels": {**rule.get("labels", {}), **firing[name]},
            "exp_annotations": rule.get("annotations", {})}]
        checks.append({"eval_time": f"{QUIET + TROUBLE - 1}m", "alertname": name,
                       "exp_alerts": alerts})
    return checks


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.fixture
def scrapes(settings: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The real /metrics output: quiet; stalled (same database, the broker gone and one
    source failing); troubled (every condition of cond.troubled on top of the quiet one)."""
    settings.GPUPOOL_METRICS_TOKEN = cond.TOKEN
    cond.own_queue(settings)
    cond.healthy()
    out = {"quiet": cond.scrape_text()}
    broker = settings.CELERY_BROKER_URL
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    with monkeypatch.context() as patch:
        patch.setattr(selectors, "webhook_backlog", _boom)
        out["stalled"] = cond.scrape_text()
    settings.CELERY_BROKER_URL = broker
    cond.troubled()
    out["troubled"] = cond.scrape_text()
    cond.clear_broker()
    return out


def _boom(now: Any) -> Any:
    raise RuntimeError("webhook backlog unreadable")


def _test_file(tmp_path: Path, rules: Path, scrapes: dict[str, str]) -> Path:
    tests = [
        {"name": "troubled", "interval": "1m",
         "input_series": input_series(scrapes["quiet"], scrapes["troubled"]),
         "alert_rule_test": _expected({
             "GpupoolQueueStuck": {}, "GpupoolSchedulePassSlow": {},
             "GpupoolAgentsLagging": {}, "GpupoolNodesUnreachable": {},
             "GpupoolRepairQueueGrowing": {}, "GpupoolWebhookBacklog": {},
             "GpupoolCeleryBacklog": {}})},
        {"name": "stalled", "interval": "1m",
         "input_series": input_series(scrapes["quiet"], scrapes["stalled"]),
         "alert_rule_test": _expected({
             "GpupoolSchedulerStalled": {}, "GpupoolCeleryBrokerDown": {},
             "GpupoolMetricsSourceFailing": {"source": "webhooks"}})},
        {"name": "portal down", "interval": "1m",
         "input_series": input_series(scrapes["quiet"], None),
         "alert_rule_test": _expected({"GpupoolPortalDown": dict(TARGET)})},
    ]
    path = tmp_path / "gpupool-alerts.test.yml"
    path.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m",
                                    "tests": tests}, sort_keys=False))
    return path


def test_the_rules_load() -> None:
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in result.stdout


def test_the_rules_fire_on_their_conditions_and_only_then(tmp_path: Path,
                                                          scrapes: dict[str, str]) -> None:
    result = promtool("test", "rules", str(_test_file(tmp_path, RULES, scrapes)))
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_rule_that_cannot_fire_fails_the_rule_test(tmp_path: Path,
                                                     scrapes: dict[str, str]) -> None:
    """The harness can fail: the queue rule with a threshold of a day never fires on the
    two-hour-old order, and promtool says so."""
    text = RULES.read_text()
    broken = text.replace("max(gpupool_orders_pending_oldest_seconds) > 1800",
                          "max(gpupool_orders_pending_oldest_seconds) > 86400")
    assert broken != text
    rules = tmp_path / "broken-alerts.yml"
    rules.write_text(broken)
    result = promtool("test", "rules", str(_test_file(tmp_path, rules, scrapes)))
    assert result.returncode != 0
    assert "GpupoolQueueStuck" in result.stdout + result.stderr


def test_messages_left_in_the_shared_celery_queue_do_not_raise_the_backlog_alert(
        tmp_path: Path, settings: Any) -> None:
    """Regression: CI's broker held > 500 stray messages in ``celery`` (tests without
    workers) and the quiet scrape fired GpupoolCeleryBacklog."""
    settings.GPUPOOL_METRICS_TOKEN = cond.TOKEN
    client = redis.Redis.from_url(settings.REDIS_URL)
    stray = f"gpupool-stray-{uuid.uuid4().hex}"
    settings.CELERY_TASK_QUEUES = (Queue(stray),)
    client.rpush(stray, *[b"{}"] * 600)
    try:
        cond.own_queue(settings)
        cond.healthy()
        depth = {s.labels.get("queue"): s.value
                 for family in text_string_to_metric_families(cond.scrape_text())
                 for s in family.samples if s.name == "gpupool_celery_queue_length"}
        assert depth == {cond.QUEUE: 0}
    finally:
        client.delete(stray)
        cond.clear_broker()
