from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from portal.monitoring import access
from portal.monitoring.collector import PortalCollector


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus' text format: the portal's collector only (a registry of its own: one web
    process's Python internals are not the portal's)."""
    status = access.verdict(request)
    if status != 200:
        response = HttpResponse("metrics: a bearer token is required\n" if status == 401
                                else "metrics: not allowed\n", status=status,
                                content_type="text/plain; charset=utf-8")
        if status == 401:
            response["WWW-Authenticate"] = 'Bearer realm="gpupool-metrics"'
        return response
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PortalCollector())
    response = HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
    response["Cache-Control"] = "no-store"
    return response
