"""The agent API, protocol v1, mounted at ``/api/agent/v1/`` (docs/agent-protocol.md)."""

from django.urls import path, re_path

from portal.fleet.api import views

app_name = "agent_api"

urlpatterns = [
    path("enrol", views.enrol, name="enrol"),
    path("nodes/<str:node_id>/reports", views.reports, name="reports"),
    path("nodes/<str:node_id>/desired-state", views.desired_state, name="desired-state"),
    path("nodes/<str:node_id>/credential", views.credential, name="credential"),
    # §4: any other path is a 404 not_found with a protocol error body
    re_path(r"", views.unknown_endpoint, name="unknown"),
]
