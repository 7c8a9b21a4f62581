import re
import urllib.request
from pathlib import Path

from prometheus_client import CollectorRegistry

from agents.host import HostSample
from agents.metrics import MetricsServer, SampleCollector, ib_families, render_sample
from agents.nvml.collector import NvmlCollector
from agents.nvml.fake import FakeNvml
from agents.sysfs.infiniband import InfinibandCollector
from agents.telemetry import NodeSample
from tests.agents.conftest import SYSFS_FIXTURES

SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")


def parse_samples(text: str, prefix: str) -> dict[tuple[str, str], float]:
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(prefix):
            continue
        m = SAMPLE_RE.match(line)
        assert m, line
        out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


def test_reproduces_node_exporter_values(node_exporter_sys: Path) -> None:
    from prometheus_client.registry import Collector

    devices = InfinibandCollector(node_exporter_sys).collect()

    class C(Collector):
        def collect(self):  # type: ignore[no-untyped-def]
            return ib_families(devices)

    reg = CollectorRegistry()
    reg.register(C())
    from agents.metrics import render

    ours = parse_samples(render(reg).decode(), "node_infiniband_")
    expected_text = (SYSFS_FIXTURES / "node_exporter-infiniband-expected.prom").read_text()
    expected = parse_samples(expected_text, "node_infiniband_")
    assert len(expected) == 51
    assert ours == expected
    # HELP/TYPE lines are node_exporter's too
    rendered = render(reg).decode()
    for line in expected_text.splitlines():
        if line.startswith("# TYPE"):
            assert line in rendered, line


def _sample(tmp_path: Path, sysfs: Path) -> NodeSample:
    api = FakeNvml("h100x2", host="node-017")
    api.nvmlInit()
    api.gpus[0].power_mw = 350_500
    api.gpus[0].used_mib = 2048
    api.gpus[0].energy_mj = 42
    coll = NvmlCollector(api)
    coll.record_xid(api.gpus[1].uuid, 79)
    return NodeSample(
        ts=0.0,
        host=HostSample(hostname="node-017"),
        gpus=coll.collect(),
        ib=InfinibandCollector(sysfs).collect(),
    )


def test_dcgm_names_labels_units(tmp_path: Path, node_exporter_sys: Path) -> None:
    sample = _sample(tmp_path, node_exporter_sys)
    text = render_sample(sample).decode()
    uuid0 = sample.gpus.gpus[0].uuid
    labels = (
        f'{{Hostname="node-017",UUID="{uuid0}",device="nvidia0",gpu="0",'
        f'modelName="NVIDIA H100 80GB HBM3",pci_bus_id="00000000:18:00.0"}}'
    )
    assert f"DCGM_FI_DEV_POWER_USAGE{labels} 350.5" in text
    assert f"DCGM_FI_DEV_FB_USED{labels} 2048.0" in text
    assert f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{labels} 42.0" in text
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in text
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total" not in text
    assert f"DCGM_FI_DEV_XID_ERRORS{labels} 0.0" in text
    assert 'DCGM_FI_DEV_XID_ERRORS{Hostname="node-017",UUID="' in text
    assert re.search(r'gpupool_gpu_healthy\{Hostname="node-017",UUID="[^"]+",gpu="1"\} 0.0', text)
    sat = 'gpupool_infiniband_counter_saturated{counter="port_xmit_wait",device="mlx4_0",port="1"}'
    assert f"{sat} 1.0" in text
    assert "node_infiniband_port_transmit_wait_total" in text


def test_metrics_endpoint(tmp_path: Path, node_exporter_sys: Path) -> None:
    reg = CollectorRegistry()
    coll = SampleCollector()
    reg.register(coll)
    server = MetricsServer(reg, port=0)
    server.start()
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        assert urllib.request.urlopen(url, timeout=5).read() == b""
        coll.set(_sample(tmp_path, node_exporter_sys))
        body = urllib.request.urlopen(url, timeout=5).read().decode()
        assert "DCGM_FI_DEV_GPU_UTIL{" in body
        assert 'node_infiniband_state_id{device="mlx4_0",port="1"} 4.0' in body
    finally:
        server.stop()
