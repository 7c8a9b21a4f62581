"""WhiteNoise in both modes: under ASGI a non-static request passes straight through
(WhiteNoise 6 is sync-only, which costs every async request two thread hops)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.http import HttpRequest, HttpResponse
from whitenoise.middleware import WhiteNoiseMiddleware


class DualModeWhiteNoiseMiddleware(WhiteNoiseMiddleware):  # type: ignore[misc]
    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any], *args: Any,
                 **kwargs: Any) -> None:
        super().__init__(get_response, *args, **kwargs)
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        return super().__call__(request)

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        if self.autorefresh:  # development: looks on disk
            static_file = await sync_to_async(self.find_file)(request.path_info)
        else:
            static_file = self.files.get(request.path_info)
        if static_file is not None:  # opens the file: off the event loop
            response: HttpResponse = await sync_to_async(self.serve)(static_file, request)
            return response
        forwarded: HttpResponse = await self.get_response(request)
        return forwarded
