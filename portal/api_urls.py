"""REST API v1 routes. Every route must appear in tests/portal/test_access_matrix.py."""

from django.urls import include, path
from rest_framework.routers import SimpleRouter

from portal.core.api.views import AuditLogViewSet
from portal.inventory.api import views as inventory
from portal.tenants.api import views as tenants

router = SimpleRouter(trailing_slash="/?")
router.register("tenants", tenants.TenantViewSet, basename="tenant")
router.register(r"tenants/(?P<tenant_slug>[-a-zA-Z0-9_]+)/memberships",
                tenants.MembershipViewSet, basename="membership")
router.register("api-keys", tenants.ApiKeyViewSet, basename="apikey")
router.register("nodes", inventory.NodeViewSet, basename="node")
router.register("gpus", inventory.GpuViewSet, basename="gpu")
router.register("switches", inventory.SwitchViewSet, basename="switch")
router.register("fabrics", inventory.FabricViewSet, basename="fabric")
router.register("audit-log", AuditLogViewSet, basename="auditlog")

urlpatterns = [
    path("me", tenants.MeView.as_view(), name="me"),
    path("capacity", inventory.CapacityView.as_view(), name="capacity"),
    path("", include(router.urls)),
]
