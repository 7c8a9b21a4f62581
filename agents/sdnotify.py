"""systemd's notify protocol over ``$NOTIFY_SOCKET`` (stdlib only, no libsystemd).

Units run the agents with ``Type=notify`` and ``WatchdogSec=``: ``READY=1`` once the agent
is set up, ``WATCHDOG=1`` from the sample loop (a wedged loop stops the pings and systemd
restarts the agent), ``STOPPING=1`` on the way out. Without ``$NOTIFY_SOCKET`` (not under
systemd, tests) every call is a no-op.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Mapping


def _address(raw: str) -> str | bytes:
    """``@name`` is Linux's abstract namespace (a leading NUL byte), anything else a path."""
    return b"\0" + raw[1:].encode() if raw.startswith("@") else raw


class Notifier:
    def __init__(self, env: Mapping[str, str] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        environ = os.environ if env is None else env
        self.socket_path = environ.get("NOTIFY_SOCKET", "")
        usec = environ.get("WATCHDOG_USEC", "")
        # ping at half the watchdog period, as sd_watchdog_enabled(3) advises
        self.watchdog_interval_s = int(usec) / 2e6 if usec.isdigit() and int(usec) else None
        self._clock = clock
        self._last_ping: float | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.socket_path)

    def notify(self, message: str) -> bool:
        """Send one datagram; False when not under systemd or the socket is gone."""
        if not self.socket_path:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
                s.connect(_address(self.socket_path))
                s.sendall(message.encode())
        except OSError:
            return False
        return True

    def ready(self, status: str = "") -> bool:
        return self.notify("READY=1" + (f"\nSTATUS={status}" if status else ""))

    def stopping(self) -> bool:
        return self.notify("STOPPING=1")

    def watchdog(self) -> bool:
        """``WATCHDOG=1``, at most once per half watchdog period (callers may call often)."""
        if self.watchdog_interval_s is None:
            return False
        now = self._clock()
        if self._last_ping is not None and now - self._last_ping < self.watchdog_interval_s:
            return False
        self._last_ping = now
        return self.notify("WATCHDOG=1")
