"""Named crash points for fault-injection tests (no effect unless the environment asks).

``crashpoint("name")`` kills the current process with SIGKILL, once, when
``GPUPOOL_CRASH_AT`` equals ``name``. "Once" is remembered by a flag file named by
``GPUPOOL_CRASH_ONCE_FILE`` (created just before dying), so a restarted worker with the
same environment does not crash again. Without ``GPUPOOL_CRASH_ONCE_FILE`` nothing happens:
an accidental ``GPUPOOL_CRASH_AT`` alone cannot put a process into a crash loop.
"""

from __future__ import annotations

import os
import signal


def crashpoint(name: str) -> None:
    if os.environ.get("GPUPOOL_CRASH_AT") != name:
        return
    flag = os.environ.get("GPUPOOL_CRASH_ONCE_FILE")
    if not flag:
        return
    try:
        fd = os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    os.write(fd, f"{name} {os.getpid()}\n".encode())
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)
