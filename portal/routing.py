"""WebSocket routes (filled by the live pages)."""

from typing import Any

websocket_urlpatterns: list[Any] = []

from portal.web.routing import websocket_urlpatterns as web_routes  # noqa: E402

websocket_urlpatterns += web_routes
