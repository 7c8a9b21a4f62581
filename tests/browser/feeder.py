"""Test helper: plays the node agents' telemetry reports for the GPUs that leases hold.

The demo's simulated agents apply desired state but report no telemetry, so the browser
test runs this beside the server: every second it upserts the latest sample of each
leased GPU and HCA port, as the fleet's report ingestion does. Run with the server's
environment (DATABASE_URL, GPUPOOL_DATA_DIR).
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time

import django

sys.path.insert(0, os.getcwd())
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django.setup()

from django.db import OperationalError  # noqa: E402
from django.utils import timezone  # noqa: E402

from portal.fleet.models import GpuTelemetry, PortTelemetry  # noqa: E402
from portal.inventory.models import HcaPort  # noqa: E402
from portal.leasing.models import Allocation  # noqa: E402


def tick(n: int) -> None:
    now = timezone.now()
    held = set(Allocation.objects.filter(live=True).values_list("node_id", "gpu__index",
                                                                "gpu__uuid"))
    for node_id, index, uuid in held:
        wave = 50 + 45 * math.sin(n / 3 + index)
        GpuTelemetry.objects.update_or_create(node_id=node_id, index=index, defaults={
            "uuid": uuid, "ts": now, "healthy": True, "lost": False, "data": {
                "gpu_util_pct": round(wave), "memory_used_bytes": int(40e9 + wave * 1e8),
                "memory_total_bytes": int(80e9), "temperature_c": 40 + round(wave / 3),
                "power_w": 150 + 5 * wave}})
    nodes = {node_id for node_id, _, _ in held}
    for port in HcaPort.objects.filter(node_id__in=nodes):
        rate = 5e9 + 4e9 * math.sin(n / 4)
        PortTelemetry.objects.update_or_create(
            node_id=port.node_id, device=port.device, port=port.port_number, defaults={
                "port_guid": port.port_guid, "ts": now, "state_id": 4, "phys_state_id": 5,
                "data": {"rates_per_s": {"port_xmit_bytes": rate, "port_rcv_bytes": rate / 2},
                         "counters": {"symbol_error": 0}}})


if __name__ == "__main__":
    n = 0
    while True:
        with contextlib.suppress(OperationalError):  # a busy SQLite writer: next second
            tick(n)
        n += 1
        time.sleep(1)
