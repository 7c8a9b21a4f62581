"""Settings for the stack's ASGI server: the real settings, persistent DB connections off.

Under ASGI, Django runs each request's sync code in a fresh thread; with
``CONN_MAX_AGE > 0`` every such thread keeps its own PostgreSQL connection until the garbage
collector finds it, and a burst of requests exhausts ``max_connections`` ("sorry, too many
clients already" → 500s). Django's docs: disable persistent connections under ASGI.
``portal/settings.py`` sets ``conn_max_age=60`` for every process (reported to the lead);
the Celery workers keep it, the ASGI server gets 0 here.
"""

from portal.settings import *  # noqa: F403
from portal.settings import DATABASES

DATABASES["default"]["CONN_MAX_AGE"] = 0
