"""Background thread that waits on an NVML event set for XID critical errors."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agents.nvml import binding
from agents.nvml.collector import CRITICAL_XIDS, NvmlCollector

log = logging.getLogger("agents.nvml.xid")


@dataclass(frozen=True)
class XidEvent:
    gpu_uuid: str
    xid: int
    ts: float  # unix seconds


class XidWatcher:
    """Registers every GPU for ``nvmlEventTypeXidCriticalError`` and feeds the collector."""

    def __init__(self, api: Any, collector: NvmlCollector, wait_ms: int = 500) -> None:
        self.api = api
        self.collector = collector
        self.wait_ms = wait_ms
        self.events: deque[XidEvent] = deque(maxlen=1000)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._uuids: dict[int, str] = {}
        self.on_critical: Callable[[], None] | None = None  # the agent: sample, report now

    def start(self) -> None:
        event_set = self.api.nvmlEventSetCreate()
        for index in range(int(self.api.nvmlDeviceGetCount())):
            try:
                h = self.api.nvmlDeviceGetHandleByIndex(index)
                uuid = str(self.api.nvmlDeviceGetUUID(h))
                self._uuids[id(h)] = uuid
                self.api.nvmlDeviceRegisterEvents(
                    h, self.api.nvmlEventTypeXidCriticalError, event_set
                )
            except binding.NVMLError as exc:
                log.warning("xid events unavailable", extra={"gpu": index, "error": str(exc)})
        self._thread = threading.Thread(
            target=self._run, args=(event_set,), name="xid-watcher", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def drain(self) -> list[XidEvent]:
        out: list[XidEvent] = []
        while self.events:
            out.append(self.events.popleft())
        return out

    def _run(self, event_set: Any) -> None:
        try:
            while not self._stop.is_set():
                try:
                    data = self.api.nvmlEventSetWait(event_set, self.wait_ms)
                except binding.Timeout:
                    continue
                except binding.GpuIsLost:
                    log.error("gpu lost while waiting for events")
                    time.sleep(self.wait_ms / 1000.0)
                    continue
                except binding.NVMLError as exc:
                    log.error("event wait failed", extra={"error": str(exc)})
                    time.sleep(self.wait_ms / 1000.0)
                    continue
                self._handle(data)
        finally:
            with contextlib.suppress(binding.NVMLError):
                self.api.nvmlEventSetFree(event_set)

    def _handle(self, data: Any) -> None:
        uuid = self._uuids.get(id(data.device))
        if uuid is None:
            try:
                uuid = str(self.api.nvmlDeviceGetUUID(data.device))
            except binding.NVMLError:
                uuid = "unknown"
        xid = int(data.eventData)
        self.events.append(XidEvent(gpu_uuid=uuid, xid=xid, ts=time.time()))
        self.collector.record_xid(uuid, xid)
        if xid == 79:
            self.collector.mark_lost(uuid)
        log.warning("xid", extra={"gpu_uuid": uuid, "xid": xid})
        if xid in CRITICAL_XIDS and self.on_critical is not None:
            self.on_critical()
