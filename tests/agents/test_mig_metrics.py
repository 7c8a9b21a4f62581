"""MIG instances on /metrics with dcgm-exporter's labels (GPU_I_PROFILE, GPU_I_ID on the
parent GPU's gpu/UUID/pci_bus_id/device/modelName, and Hostname)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from prometheus_client import CollectorRegistry

from agents.client.fakeportal import FakePortal, serve
from agents.metrics import render
from agents.migmetrics import MigCollector
from agents.nvml import mig
from agents.nvml.collector import NvmlCollector
from agents.nvml.fake import FakeNvml
from agents.sysfs.faketree import FakeSysfsWriter, gpu_node_hcas
from tests.agents.helpers import write_node_config

ROOT = Path(__file__).resolve().parents[2]

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


def _free_port() -> int:
    for port in range(8631, 8640):  # this worktree's ports
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 8631-8639")


def _scrape(url: str, deadline: float, want: str) -> str:
    text = ""
    while time.monotonic() < deadline:
        try:
            text = httpx.get(url, timeout=2).text
        except httpx.HTTPError:
            text = ""
        if want in text:
            break
        time.sleep(0.2)
    return text


def test_the_running_agents_metrics_carry_its_mig_instances(tmp_path: Path) -> None:
    """The node daemon (``python -m agents node``, fake NVML) applies a MIG layout from its
    desired state and its own ``/metrics`` shows each instance's framebuffer series with
    dcgm-exporter's labels, beside the whole GPUs' series."""
    portal = FakePortal()
    server = serve(portal)
    writer = FakeSysfsWriter(tmp_path / "sys")
    for hca in gpu_node_hcas(1):
        writer.add(hca)
    port = _free_port()
    cfg = write_node_config(tmp_path, f"http://127.0.0.1:{server.server_address[1]}",
                            "h100x2", f"127.0.0.1:{port}")
    env = {**os.environ, "GPUPOOL_AGENT_PORTAL_BOOTSTRAP_TOKEN": portal.issue_bootstrap_token()}
    proc = subprocess.Popen([sys.executable, "-m", "agents", "node", "--config", str(cfg)],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not portal.nodes and time.monotonic() < deadline:
            time.sleep(0.1)
        node = next(iter(portal.nodes.values()))
        portal.set_desired(node.node_id, partitions=[], access_grants=[], mig=[
            {"gpu_index": 1, "instances": [{"profile": "3g.40gb", "start": 0},
                                           {"profile": "1g.10gb", "start": 6}]}])
        text = _scrape(f"http://127.0.0.1:{port}/metrics", deadline, 'GPU_I_PROFILE="1g.10gb"')
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            server.shutdown()
    used = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_FB_USED{")]
    mig_lines = [line for line in used if "GPU_I_ID" in line]
    assert len(used) == 4 and len(mig_lines) == 2  # two whole GPUs' series, two instances'
    dcgm_names = [k for k, _ in _labels(DCGM_MIG_LINE) if k != "DCGM_FI_DRIVER_VERSION"]
    for line in mig_lines:
        values = dict(_labels(line))
        assert sorted(values) == sorted(dcgm_names)
        assert values["gpu"] == "1" and values["device"] == "nvidia1"
        assert values["modelName"] == "NVIDIA H100 80GB HBM3"
    assert {dict(_labels(line))["GPU_I_PROFILE"] for line in mig_lines} == \
        {"3g.40gb", "1g.10gb"}
    assert sum(line.startswith("DCGM_FI_DEV_FB_FREE{") and "GPU_I_ID" in line
               for line in text.splitlines()) == 2
    info = [line for line in text.splitlines() if line.startswith("gpupool_mig_instance_info{")]
    assert len(info) == 2 and all('mig_uuid="MIG-' in line for line in info)
    assert text.count("# TYPE DCGM_FI_DEV_FB_USED ") == 1  # one family per name
