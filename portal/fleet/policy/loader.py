"""The effective table for this site: the defaults ⊕ the YAML file named by the setting
``GPUPOOL_HEALTH_POLICY`` (a path; unset or empty: the defaults). Re-read when the file's
modification time changes. A bad file raises ``PolicyError`` (never a half-applied table).
"""

from __future__ import annotations

import os
import threading

from django.conf import settings

from portal.fleet.policy.overrides import load_file
from portal.fleet.policy.table import PolicyTable, default_table

_lock = threading.Lock()
_cached: dict[tuple[str, float], PolicyTable] = {}


def policy_path() -> str:
    return str(getattr(settings, "GPUPOOL_HEALTH_POLICY", "") or "")


def effective_table() -> PolicyTable:
    """The table the portal applies now."""
    path = policy_path()
    if not path:
        return default_table()
    try:
        key = (path, os.stat(path).st_mtime)
    except OSError:
        key = (path, -1.0)  # load_file names the problem
    with _lock:
        if key not in _cached:
            table = load_file(path)
            _cached.clear()
            _cached[key] = table
        return _cached[key]
