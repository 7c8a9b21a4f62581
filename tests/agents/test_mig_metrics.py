"""MIG instances on /metrics with dcgm-exporter's labels (GPU_I_PROFILE, GPU_I_ID on the
parent GPU's gpu/UUID/pci_bus_id/device/modelName, and Hostname)."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry

from agents.metrics import render
from agents.migmetrics import MigCollector
from agents.nvml import mig
from agents.nvml.collector import NvmlCollector
from agents.nvml.fake import FakeNvml

# dcgm-exporter's MIG series (NVIDIA/dcgm-exporter issue 544, an H100 NVL in MIG mode)
DCGM_MIG_LINE = ('DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-153bdcb7-df30-40e2-3f2c-379902ba72fa",'
                 'pci_bus_id="00000000:00:06.0",device="nvidia0",modelName="NVIDIA H100 NVL",'
                 'GPU_I_PROFILE="1g.11gb",GPU_I_ID="7",Hostname="h",'
                 'DCGM_FI_DRIVER_VERSION="535.230.02"} 12')
LABEL = re.compile(r'(\w+)="([^"]*)"')


def _labels(line: str) -> list[tuple[str, str]]:
    return LABEL.findall(line[line.index("{"):line.index("}")])


def test_mig_series_carry_dcgm_exporters_labels() -> None:
    api = FakeNvml("h100x2", host="node-9")
    api.nvmlInit()
    result = mig.reconcile(api, 1, [("3g.40gb", 0), ("1g.10gb", 6)])
    api.add_process(1, pid=5, used_mib=2048)
    api.processes[5].gpu_instance = next(i.gpu_instance_id for i in result.instances
                                         if i.start == 0)
    instances = mig.list_instances(api, api.nvmlDeviceGetHandleByIndex(1), 1)
    gpus = NvmlCollector(api).collect().gpus
    registry = CollectorRegistry()
    collector = MigCollector("node-9")
    collector.set(instances, gpus)
    registry.register(collector)
    text = render(registry).decode()
    used = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_FB_USED{")]
    assert len(used) == 2
    dcgm_names = [k for k, _ in _labels(DCGM_MIG_LINE) if k != "DCGM_FI_DRIVER_VERSION"]
    by_start = {}
    for line in used:
        labels = _labels(line)
        assert sorted(k for k, _ in labels) == sorted(dcgm_names)  # order is not meaning
        values = dict(labels)
        assert values["UUID"] == gpus[1].uuid and values["device"] == "nvidia1"
        assert values["modelName"] == "NVIDIA H100 80GB HBM3" and values["Hostname"] == "node-9"
        by_start[values["GPU_I_PROFILE"]] = (values["GPU_I_ID"], float(line.rsplit(" ", 1)[1]))
    assert by_start["3g.40gb"][1] == 2048.0 and by_start["1g.10gb"][1] == 0.0
    info = [line for line in text.splitlines() if line.startswith("gpupool_mig_instance_info{")]
    assert {dict(_labels(line))["mig_uuid"] for line in info} == {i.uuid for i in instances}
