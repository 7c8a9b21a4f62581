"""REST API v1 routes. Every route must appear in tests/portal/test_access_matrix.py."""

from django.urls import include, path
from rest_framework.routers import SimpleRouter

from portal.billing.api import views as billing
from portal.fleet.api import service as fleet_service
from portal.inventory.api import views as inventory
from portal.leasing.api import miglayout as leasing_mig
from portal.leasing.api import views as leasing
from portal.tenants.api import views as tenants
from portal.tenants.api.audit import AuditLogViewSet
from portal.webhooks.api import views as webhooks

router = SimpleRouter()
router.trailing_slash = "/?"  # accept both /leases and /leases/ (DRF's flag is a bool)
router.register("tenants", tenants.TenantViewSet, basename="tenant")
router.register(r"tenants/(?P<tenant_slug>[-a-zA-Z0-9_]+)/memberships",
                tenants.MembershipViewSet, basename="membership")
router.register(r"tenants/(?P<tenant_slug>[-a-zA-Z0-9_]+)/invitations",
                tenants.InvitationViewSet, basename="invitation")
router.register("api-keys", tenants.ApiKeyViewSet, basename="apikey")
router.register("nodes", inventory.NodeViewSet, basename="node")
router.register("gpus", inventory.GpuViewSet, basename="gpu")
router.register("switches", inventory.SwitchViewSet, basename="switch")
router.register("fabrics", inventory.FabricViewSet, basename="fabric")
router.register("storage-endpoints", inventory.StorageEndpointViewSet,
                basename="storage-endpoint")
router.register("audit-log", AuditLogViewSet, basename="auditlog")
router.register("leases", leasing.LeaseViewSet, basename="lease")
router.register("webhooks/deliveries", webhooks.DeliveryViewSet, basename="webhook-delivery")
router.register("webhooks", webhooks.WebhookViewSet, basename="webhook")

urlpatterns = [
    path("me", tenants.MeView.as_view(), name="me"),
    path("invitations/accept", tenants.InvitationAcceptView.as_view(), name="invitation-accept"),
    path("capacity", inventory.CapacityView.as_view(), name="capacity"),
    path("billing/usage", billing.UsageExportView.as_view(), name="billing-usage"),
    path("billing/invoices", billing.InvoiceListView.as_view(), name="billing-invoices"),
    path("billing/invoices/<int:year>-<int:month>.csv", billing.InvoiceCsvView.as_view(),
         name="billing-invoice-csv"),
    path("billing/budget", billing.BudgetView.as_view(), name="billing-budget"),
    path("billing/showback", billing.ShowbackView.as_view(), name="billing-showback"),
    path("orders", leasing.OrderView.as_view(), name="order-create"),
    path("orders/quote", leasing.QuoteView.as_view(), name="order-quote"),
    path("quotas", leasing.QuotaView.as_view(), name="quota-usage"),
    path("fleet/repair-queue", fleet_service.RepairQueueView.as_view(), name="repair-queue"),
    path("fleet/nodes/<str:hostname>/service", fleet_service.NodeServiceView.as_view(),
         name="node-service"),
    path("fleet/nodes/<str:hostname>/mig-layout", leasing_mig.NodeMigLayoutView.as_view(),
         name="node-mig-layout"),
    path("fleet/nodes/<str:hostname>/mig-mode", leasing_mig.NodeMigModeView.as_view(),
         name="node-mig-mode"),
    path("fleet/gpus/<str:uuid>/service", fleet_service.GpuServiceView.as_view(),
         name="gpu-service"),
    path("", include(router.urls)),
]
