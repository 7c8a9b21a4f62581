from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerSplitView,
)

from portal.core import views as core_views
from portal.core.throttles import throttled
from portal.monitoring import views as monitoring_views
from portal.sso import forms as sso_forms
from portal.web.views import account as account_views
from portal.web.views import assets as asset_views

urlpatterns = [
    path("healthz", core_views.healthz, name="healthz"),
    path("metrics", monitoring_views.metrics, name="metrics"),
    path("favicon.ico", asset_views.favicon, name="favicon"),
    path("admin/", admin.site.urls),
    path("accounts/login/", throttled("login")(auth_views.LoginView.as_view(
        authentication_form=sso_forms.PasswordLoginForm,
        extra_context={"sso_providers": sso_forms.sign_in_providers})), name="login"),
    path("accounts/oidc/", include("portal.sso.urls")),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/agent/v1/", include("portal.fleet_urls")),
    path("console/", include("portal.console.urls")),
    path("billing/", include("portal.billing.urls")),
    path("tenant/webhooks/", include("portal.webhooks.urls")),
    path("api/v1/", include("portal.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="swagger-ui"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="redoc"),
    path("i18n/setlang/", account_views.set_language, name="set_language"),
    path("", include("portal.web.urls")),
]
