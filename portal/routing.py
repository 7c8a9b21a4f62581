"""WebSocket routes (filled by the live pages)."""

from typing import Any

websocket_urlpatterns: list[Any] = []
