"""``/metrics``: who may read it, and that each series says what the database holds
(acceptance of issue 31, "Operational metrics": the listed series with the right values)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from portal.core import histograms
from portal.leasing.lifecycle import placing
from portal.leasing.models import Lease, LeaseState
from portal.monitoring import selectors
from tests.portal.factories import make_tenant
from tests.portal.monitoring import conditions as cond
from tests.portal.monitoring.conditions import samples, value

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.django_db, pytest.mark.services("postgres", "redis")]


@pytest.fixture(autouse=True)
def _metrics_settings(settings: Any) -> Any:
    settings.GPUPOOL_METRICS_TOKEN = cond.TOKEN
    settings.GPUPOOL_METRICS_ALLOW = ""
    cond.own_queue(settings)
    yield settings
    cond.clear_broker()


# --- access -----------------------------------------------------------------------------

def test_no_credential_is_401_with_a_bearer_challenge() -> None:
    response = Client().get("/metrics")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert b"gpupool_" not in response.content


def test_a_wrong_token_or_scheme_is_403() -> None:
    for header in (f"Bearer {cond.TOKEN}x", "Bearer ", f"Basic {cond.TOKEN}"):
        response = Client().get("/metrics", HTTP_AUTHORIZATION=header)
        assert response.status_code == 403, header
        assert b"gpupool_" not in response.content


def test_a_signed_in_staff_session_is_not_enough(admin_client: Client) -> None:
    assert admin_client.get("/metrics").status_code == 401


def test_nothing_configured_lets_nobody_in(settings: Any) -> None:
    settings.GPUPOOL_METRICS_TOKEN = ""
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 403
    assert Client().get("/metrics").status_code == 401


def test_an_allow_listed_address_needs_no_token(settings: Any) -> None:
    settings.GPUPOOL_METRICS_ALLOW = "10.1.0.0/16, 192.0.2.7"
    assert Client(REMOTE_ADDR="10.1.2.3").get("/metrics").status_code == 200
    assert Client(REMOTE_ADDR="192.0.2.7").get("/metrics").status_code == 200
    assert Client(REMOTE_ADDR="10.2.0.1").get("/metrics").status_code == 401


def test_the_token_is_accepted_and_no_tenant_name_is_exposed() -> None:
    cond.troubled()
    text = cond.scrape_text()
    assert "busy" not in text and "gpu-node" not in text  # tenant slug, host names


# --- values -----------------------------------------------------------------------------

def test_every_series_says_what_the_database_holds() -> None:
    cond.troubled()
    got = samples(cond.scrape_text())
    # orders waiting, by reason; the oldest due one waited about two hours
    assert value(got, "gpupool_orders_pending", reason="insufficient_capacity") == 1
    assert value(got, "gpupool_orders_pending", reason="quota") == 1
    assert value(got, "gpupool_orders_pending", reason="new") == 1
    assert 7190 < value(got, "gpupool_orders_pending_oldest_seconds") < 7300
    # order -> active: 45 s and 700 s
    assert value(got, "gpupool_order_to_active_seconds_bucket", le="30.0") == 0
    assert value(got, "gpupool_order_to_active_seconds_bucket", le="60.0") == 1
    assert value(got, "gpupool_order_to_active_seconds_bucket", le="600.0") == 1
    assert value(got, "gpupool_order_to_active_seconds_bucket", le="1800.0") == 2
    assert value(got, "gpupool_order_to_active_seconds_count") == 2
    assert value(got, "gpupool_order_to_active_seconds_sum") == pytest.approx(745, abs=1)
    # scheduling passes: 0.3, 12, 20, 25 s
    assert value(got, "gpupool_schedule_pass_duration_seconds_bucket", le="0.5") == 1
    assert value(got, "gpupool_schedule_pass_duration_seconds_bucket", le="10.0") == 1
    assert value(got, "gpupool_schedule_pass_duration_seconds_bucket", le="30.0") == 4
    assert value(got, "gpupool_schedule_pass_duration_seconds_count") == 4
    assert value(got, "gpupool_schedule_pass_duration_seconds_sum") == pytest.approx(57.3)
    # agents: 17 of 20 reported 2 s ago, 3 ten minutes ago (late: over 2 × 10 s)
    assert value(got, "gpupool_agent_report_lag_seconds_bucket", le="5.0") == 17
    assert value(got, "gpupool_agent_report_lag_seconds_bucket", le="300.0") == 17
    assert value(got, "gpupool_agent_report_lag_seconds_bucket", le="600.0") == 17
    assert value(got, "gpupool_agent_report_lag_seconds_bucket", le="1800.0") == 20
    assert value(got, "gpupool_agent_report_lag_seconds_gcount") == 20
    assert 600 <= value(got, "gpupool_agent_report_lag_max_seconds") < 660
    assert value(got, "gpupool_agents_late") == 3
    assert value(got, "gpupool_agents_never_reported") == 0
    assert value(got, "gpupool_agent_report_interval_seconds") == 10
    assert value(got, "gpupool_nodes_unreachable") == 2
    # service states of nodes and GPUs
    assert value(got, "gpupool_nodes", service="in_service") == 14
    assert value(got, "gpupool_nodes", service="out_of_service") == 4
    assert value(got, "gpupool_nodes", service="validating") == 2
    assert value(got, "gpupool_nodes", service="suspect") == 0
    assert value(got, "gpupool_gpus", service="out_of_service") == 32
    assert value(got, "gpupool_gpus", service="suspect") == 2
    assert value(got, "gpupool_gpus", service="in_service") == 160 - 34
    # webhooks: 3 pending, 2 due, the most overdue by 20 minutes
    assert value(got, "gpupool_webhook_messages_pending") == 3
    assert value(got, "gpupool_webhook_messages_due") == 2
    assert 1195 < value(got, "gpupool_webhook_oldest_due_seconds") < 1300
    # Celery's broker queue (Redis LLEN)
    assert value(got, "gpupool_celery_broker_up") == 1
    assert value(got, "gpupool_celery_queue_length", queue=cond.QUEUE) == 900
    assert all(value(got, "gpupool_metrics_source_up", source=s) == 1
               for s in ("orders", "histograms", "fleet", "webhooks", "celery"))


def test_a_real_scheduling_pass_is_timed() -> None:
    tenant = make_tenant("t")
    cond.fleet(2)
    before = histograms.read(placing.PASS_HISTOGRAM).count
    placing.run_schedule_pass()  # nothing queued: not a pass worth timing
    assert histograms.read(placing.PASS_HISTOGRAM).count == before
    now = timezone.now()
    Lease.objects.create(tenant=tenant, allowed_models=["H100"], gpu_count=1,
                         state=LeaseState.QUEUED, start_at=now, end_at=now + timedelta(hours=1))
    placing.run_schedule_pass()
    after = histograms.read(placing.PASS_HISTOGRAM)
    assert after.count == before + 1 and after.sum > 0
    got = samples(cond.scrape_text())
    assert value(got, "gpupool_schedule_pass_duration_seconds_count") == before + 1


def test_an_order_driven_to_active_is_observed(frozen_clock: Any) -> None:
    """End to end: an order placed by the reconciler's pass and provisioned by the
    (simulated) agents is one order -> active observation and one timed pass."""
    from decimal import Decimal

    from portal.leasing.orderspec import OrderSpec
    from portal.leasing.services import order_create
    from tests.portal.driving import drive, small_pool
    from tests.portal.factories import add_member

    tenant, _ = small_pool()
    user = add_member(tenant, "orderer", "member")
    lease = order_create(actor=user, tenant=tenant, spec=OrderSpec(
        models=["H100"], gpu_count=2, duration_hours=Decimal(1)))
    assert histograms.read(cond.ACTIVATION).count == 0
    drive()
    lease.refresh_from_db()
    assert lease.state == LeaseState.ACTIVE
    got = samples(cond.scrape_text())
    assert value(got, "gpupool_order_to_active_seconds_count") == 1
    assert value(got, "gpupool_schedule_pass_duration_seconds_count") >= 1
    # the frozen clock stands still: it waited 0 s
    assert value(got, "gpupool_order_to_active_seconds_bucket", le="1.0") == 1


def test_histogram_buckets_take_values_on_their_bound() -> None:
    assert histograms.bucket_for(placing.PASS_HISTOGRAM, 0.5) == "0.5"
    assert histograms.bucket_for(placing.PASS_HISTOGRAM, 0.5001) == "1.0"
    assert histograms.bucket_for(placing.PASS_HISTOGRAM, 61) == "+Inf"


def test_several_web_processes_would_agree() -> None:
    """Nothing is kept in the serving process: a second client (a fresh registry per
    scrape) sees a change made by anyone at once."""
    cond.healthy()
    first = samples(cond.scrape_text())
    histograms.observe(cond.PASS, 1.5)
    second = samples(cond.scrape_text(Client()))
    assert value(second, "gpupool_schedule_pass_duration_seconds_count") == \
        value(first, "gpupool_schedule_pass_duration_seconds_count") + 1


@pytest.mark.django_db(transaction=True)
def test_a_pass_timed_in_another_process_is_served_here() -> None:
    """The scheduling pass runs in a Celery worker, maybe on another host; the scrape is
    answered by any web process: an observation made by a separate process (over the same
    database) is in this process's scrape."""
    from urllib.parse import urlparse

    from django.db import connection

    url = urlparse(os.environ["DATABASE_URL"])._replace(
        path="/" + str(connection.settings_dict["NAME"])).geturl()
    code = ("import django; django.setup(); from portal.core import histograms; "
            f"histograms.observe({cond.PASS!r}, 3.0)")
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "portal.settings"}
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True, timeout=120)
    got = samples(cond.scrape_text())
    assert value(got, "gpupool_schedule_pass_duration_seconds_count") == 1
    assert value(got, "gpupool_schedule_pass_duration_seconds_bucket", le="2.5") == 0
    assert value(got, "gpupool_schedule_pass_duration_seconds_bucket", le="5.0") == 1
    assert value(got, "gpupool_schedule_pass_duration_seconds_sum") == 3.0


# --- failing sources ----------------------------------------------------------------------

def test_redis_down_is_reported_not_a_500(settings: Any) -> None:
    cond.healthy()
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    got = samples(cond.scrape_text())
    assert value(got, "gpupool_celery_broker_up") == 0
    assert not any(name == "gpupool_celery_queue_length" for name, _ in got)
    assert value(got, "gpupool_metrics_source_up", source="celery") == 1
    assert value(got, "gpupool_nodes", service="in_service") == 20  # the rest is served


def test_a_failing_source_is_marked_and_the_others_still_served(monkeypatch: Any) -> None:
    def broken(now: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(selectors, "webhook_backlog", broken)
    cond.healthy()
    got = samples(cond.scrape_text())
    assert value(got, "gpupool_metrics_source_up", source="webhooks") == 0
    assert value(got, "gpupool_metrics_source_up", source="fleet") == 1
    assert not any(name.startswith("gpupool_webhook") for name, _ in got)
    assert value(got, "gpupool_orders_pending", reason="insufficient_capacity") == 1
