"""ASGI entry point: HTTP through Django, WebSockets through Channels (origin-checked).

HTTP requests under ``settings.AGENT_API_PREFIX`` (the agent API) go to a lean Django
handler with ``settings.AGENT_MIDDLEWARE``; every other one to the full stack (ADR 0150).
"""

import os
from importlib import import_module

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

from channels.auth import AuthMiddlewareStack
from channels.routing import ProtocolTypeRouter, URLRouter
from channels.security.websocket import AllowedHostsOriginValidator
from django.core.asgi import get_asgi_application

django_asgi_app = get_asgi_application()

from django.conf import settings  # noqa: E402

from portal.core import gcpolicy  # noqa: E402
from portal.core.lean_asgi import LeanASGIHandler, PathPrefixDispatcher  # noqa: E402
from portal.leasing import warmup  # noqa: E402
from portal.routing import websocket_urlpatterns  # noqa: E402

agent_asgi_app = LeanASGIHandler(settings.AGENT_MIDDLEWARE)
http_app = PathPrefixDispatcher([(settings.AGENT_API_PREFIX, agent_asgi_app)],
                                default=django_asgi_app)

import_module(settings.ROOT_URLCONF)  # every view module imported now, so frozen too
gcpolicy.freeze_startup_heap()  # ADR 0172: what the imports made, before any cache is read
warmup.warm_in_background()  # GPUPOOL_WARM_WEB: this process's scheduler caches, read once

application = ProtocolTypeRouter({
    "http": http_app,
    "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
})
