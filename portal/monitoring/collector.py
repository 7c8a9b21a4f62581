"""The portal's collector: every series is read when Prometheus scrapes — gauges from
aggregate queries (and the broker), histograms from the buckets their code paths keep in
the database — so several web processes always agree (ADR 0230). Each source
is read on its own: one that fails reports ``gpupool_metrics_source_up{source} 0`` and the
others are still served."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator

from django.db import transaction
from prometheus_client.core import (
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from portal.core import clock, histograms
from portal.monitoring import broker, selectors

log = logging.getLogger(__name__)


def _le(bound: float) -> str:
    return histograms.le_label(bound)


def _pending() -> Iterator[Metric]:
    now = clock.now()
    by_reason = GaugeMetricFamily("gpupool_orders_pending",
                                  "Orders waiting to be placed, by the reason they wait",
                                  labels=["reason"])
    for reason, n in sorted(selectors.pending_orders_by_reason().items()):
        by_reason.add_metric([reason], n)
    yield by_reason
    yield GaugeMetricFamily("gpupool_orders_pending_oldest_seconds",
                            "How long the longest-waiting order whose start has come waited",
                            value=selectors.oldest_due_order_age(now))


HISTOGRAMS = {
    "gpupool_schedule_pass_duration_seconds": "Scheduling passes that found a queue, by duration",
    "gpupool_order_to_active_seconds": "Leases from order (or requested start) to active",
}


def _histograms() -> Iterator[Metric]:
    for name, doc in HISTOGRAMS.items():
        kept = histograms.read(name)
        yield HistogramMetricFamily(name, doc, buckets=kept.buckets, sum_value=kept.sum)


def _fleet() -> Iterator[Metric]:
    now = clock.now()
    lag = selectors.agent_report_lag(now)
    yield GaugeHistogramMetricFamily(
        "gpupool_agent_report_lag_seconds", "Reporting nodes by seconds since their last report",
        buckets=[(_le(b), n) for b, n in lag.lag.cumulative], gsum_value=lag.lag.sum)
    yield GaugeMetricFamily("gpupool_agent_report_lag_max_seconds",
                            "Seconds since the report of the node that reported longest ago",
                            value=lag.max_s)
    yield GaugeMetricFamily("gpupool_agents_late",
                            "Nodes whose agent is more than two report intervals behind",
                            value=lag.late)
    yield GaugeMetricFamily("gpupool_agents_never_reported",
                            "Nodes expected to report whose agent never did", value=lag.never)
    yield GaugeMetricFamily("gpupool_agent_report_interval_seconds",
                            "The report interval agents are told now", value=lag.interval_s)
    yield GaugeMetricFamily("gpupool_nodes_unreachable",
                            "Nodes the health sweep marked unreachable",
                            value=selectors.unreachable_nodes())
    nodes, gpus = selectors.by_service()
    for what, counts in (("nodes", nodes), ("gpus", gpus)):
        family = GaugeMetricFamily(f"gpupool_{what}", f"{what.capitalize()} by service state",
                                   labels=["service"])
        for state, n in sorted(counts.items()):
            family.add_metric([state], n)
        yield family


def _webhooks() -> Iterator[Metric]:
    backlog = selectors.webhook_backlog(clock.now())
    yield GaugeMetricFamily("gpupool_webhook_messages_pending",
                            "Webhook messages not yet delivered nor given up",
                            value=backlog.pending)
    yield GaugeMetricFamily("gpupool_webhook_messages_due",
                            "Pending webhook messages whose next try is due",
                            value=backlog.due)
    yield GaugeMetricFamily("gpupool_webhook_oldest_due_seconds",
                            "How overdue the most overdue webhook message is",
                            value=backlog.oldest_due_s)


def _celery() -> Iterator[Metric]:
    depth = broker.depth()
    if not depth.redis:
        return
    yield GaugeMetricFamily("gpupool_celery_broker_up",
                            "1 if the Celery broker (Redis) answered this scrape",
                            value=int(depth.up))
    if not depth.up:
        return
    queues = GaugeMetricFamily("gpupool_celery_queue_length",
                               "Celery messages waiting in the broker, by queue",
                               labels=["queue"])
    for name, n in sorted(depth.queues.items()):
        queues.add_metric([name], n)
    yield queues
    yield GaugeMetricFamily("gpupool_celery_unacked",
                            "Celery messages delivered to workers and not yet acknowledged",
                            value=depth.unacked)


SOURCES: dict[str, Callable[[], Iterable[Metric]]] = {
    "orders": _pending, "histograms": _histograms, "fleet": _fleet,
    "webhooks": _webhooks, "celery": _celery,
}


class PortalCollector(Collector):
    def collect(self) -> Iterable[Metric]:
        up = GaugeMetricFamily("gpupool_metrics_source_up",
                               "1 if this scrape read the source, 0 if reading it failed",
                               labels=["source"])
        for source, read in SOURCES.items():
            try:
                with transaction.atomic():  # a failed statement spoils no other source
                    metrics = list(read())
            except Exception:
                log.exception("metrics: source %s failed", source)
                up.add_metric([source], 0)
                continue
            up.add_metric([source], 1)
            yield from metrics
        yield up
