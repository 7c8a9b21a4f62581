from django.urls import path

from portal.webhooks import views

app_name = "webhooks"

urlpatterns = [
    path("", views.endpoint_list, name="list"),
    path("<uuid:endpoint_id>/", views.endpoint_detail, name="detail"),
    path("<uuid:endpoint_id>/enable/", views.endpoint_enable, name="enable"),
    path("<uuid:endpoint_id>/rotate/", views.endpoint_rotate, name="rotate"),
    path("<uuid:endpoint_id>/delete/", views.endpoint_delete, name="delete"),
    path("deliveries/<uuid:message_id>/resend/", views.message_resend, name="resend"),
]
