from django.urls import path

from portal.web.consumers import LeaseConsumer

websocket_urlpatterns = [
    path("ws/leases/<uuid:lease_id>/", LeaseConsumer.as_asgi()),
]
