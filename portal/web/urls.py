from django.contrib.auth import views as auth_views
from django.urls import path, reverse_lazy

from portal.core.throttles import throttled
from portal.web.views import account, dashboard, leases, orders, tenant_admin

app_name = "web"

password_reset = [
    path("accounts/password/reset/", auth_views.PasswordResetView.as_view(
        success_url=reverse_lazy("web:password_reset_done")), name="password_reset"),
    path("accounts/password/reset/sent/", auth_views.PasswordResetDoneView.as_view(),
         name="password_reset_done"),
    path("accounts/password/reset/<uidb64>/<token>/", auth_views.PasswordResetConfirmView.as_view(
        success_url=reverse_lazy("web:password_reset_complete")),
         name="password_reset_confirm"),
    path("accounts/password/reset/done/", auth_views.PasswordResetCompleteView.as_view(),
         name="password_reset_complete"),
]

urlpatterns = [
    path("", dashboard.dashboard, name="dashboard"),
    *password_reset,
    path("profile/", account.profile, name="profile"),
    path("profile/keys/<uuid:key_id>/delete/", account.ssh_key_delete, name="ssh_key_delete"),
    path("invitations/<str:token>/", throttled("invitation_accept")(account.invitation),
         name="invitation"),
    path("tenant/switch/", account.tenant_switch, name="tenant_switch"),
    path("order/", throttled("orders")(orders.order), name="order"),
    path("order/preview/", throttled("quotes")(orders.order_preview), name="order_preview"),
    path("leases/", leases.lease_list, name="leases"),
    path("leases/calendar/", leases.lease_calendar, name="calendar"),
    path("leases/<uuid:lease_id>/", leases.lease_detail, name="lease"),
    path("leases/<uuid:lease_id>/extend/", leases.lease_extend, name="lease_extend"),
    path("leases/<uuid:lease_id>/release/", leases.lease_release, name="lease_release"),
    path("leases/<uuid:lease_id>/degraded/", leases.lease_degraded, name="lease_degraded"),
    path("leases/<uuid:lease_id>/cancel/", leases.lease_cancel, name="lease_cancel"),
    path("usage/", tenant_admin.usage, name="usage"),
    path("tenant/members/", throttled("invitations")(tenant_admin.members), name="members"),
    path("tenant/members/<uuid:member_id>/role/", tenant_admin.member_role, name="member_role"),
    path("tenant/members/<uuid:member_id>/limit/", tenant_admin.member_limit,
         name="member_limit"),
    path("tenant/members/<uuid:member_id>/remove/", tenant_admin.member_remove,
         name="member_remove"),
    path("tenant/invitations/<uuid:invitation_id>/revoke/", tenant_admin.invitation_revoke,
         name="invitation_revoke"),
    path("tenant/api-keys/", throttled("api_keys")(tenant_admin.api_keys), name="api_keys"),
    path("tenant/api-keys/<uuid:key_id>/revoke/", tenant_admin.api_key_revoke,
         name="api_key_revoke"),
    path("tenant/quotas/", tenant_admin.quotas, name="quotas"),
]
