"""Prometheus exposition: dcgm-exporter names/labels for GPUs, node_exporter's
``node_infiniband_*`` for InfiniBand, ``gpupool_*`` for what neither has."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agents.migmetrics import mig_fb_samples, mig_info_family
from agents.nvml.collector import GpuSample
from agents.nvml.mig import MigInstance
from agents.sysfs.infiniband import IbDevice, IbPort
from agents.telemetry import NodeSample

MIB = 1024 * 1024
IB = "node_infiniband_"
# counters/ file -> (node_exporter metric, help, scale)
IB_COUNTERS: dict[str, tuple[str, str, int]] = {
    "excessive_buffer_overrun_errors": ("excessive_buffer_overrun_errors_total", "Number of times that OverrunErrors consecutive flow control update periods occurred, each having at least one overrun error.", 1),  # noqa: E501
    "link_downed": ("link_downed_total", "Number of times the link failed to recover from an error state and went down", 1),  # noqa: E501
    "link_error_recovery": ("link_error_recovery_total", "Number of times the link successfully recovered from an error state", 1),  # noqa: E501
    "local_link_integrity_errors": ("local_link_integrity_errors_total", "Number of times that the count of local physical errors exceeded the threshold specified by LocalPhyErrors.", 1),  # noqa: E501
    "multicast_rcv_packets": ("multicast_packets_received_total", "Number of multicast packets received (including errors)", 1),  # noqa: E501
    "multicast_xmit_packets": ("multicast_packets_transmitted_total", "Number of multicast packets transmitted (including errors)", 1),  # noqa: E501
    "port_rcv_constraint_errors": ("port_constraint_errors_received_total", "Number of packets received on the switch physical port that are discarded", 1),  # noqa: E501
    "port_xmit_constraint_errors": ("port_constraint_errors_transmitted_total", "Number of packets not transmitted from the switch physical port", 1),  # noqa: E501
    "port_rcv_data": ("port_data_received_bytes_total", "Number of data octets received on all links", 4),  # noqa: E501
    "port_xmit_data": ("port_data_transmitted_bytes_total", "Number of data octets transmitted on all links", 4),  # noqa: E501
    "port_rcv_discards": ("port_discards_received_total", "Number of inbound packets discarded by the port because the port is down or congested", 1),  # noqa: E501
    "port_xmit_discards": ("port_discards_transmitted_total", "Number of outbound packets discarded by the port because the port is down or congested", 1),  # noqa: E501
    "port_rcv_errors": ("port_errors_received_total", "Number of packets containing an error that were received on this port", 1),  # noqa: E501
    "port_rcv_packets": ("port_packets_received_total", "Number of packets received on all VLs by this port (including errors)", 1),  # noqa: E501
    "port_xmit_packets": ("port_packets_transmitted_total", "Number of packets transmitted on all VLs from this port (including errors)", 1),  # noqa: E501
    "port_rcv_remote_physical_errors": ("port_receive_remote_physical_errors_total", "Number of packets marked with the EBP (End of Bad Packet) delimiter received on the port.", 1),  # noqa: E501
    "port_rcv_switch_relay_errors": ("port_receive_switch_relay_errors_total", "Number of packets that could not be forwarded by the switch.", 1),  # noqa: E501
    "port_xmit_wait": ("port_transmit_wait_total", "Number of ticks during which the port had data to transmit but no data was sent during the entire tick", 1),  # noqa: E501
    "symbol_error": ("symbol_error_total", "Number of minor link errors detected on one or more physical lanes.", 1),  # noqa: E501
    "unicast_rcv_packets": ("unicast_packets_received_total", "Number of unicast packets received (including errors)", 1),  # noqa: E501
    "unicast_xmit_packets": ("unicast_packets_transmitted_total", "Number of unicast packets transmitted (including errors)", 1),  # noqa: E501
    "VL15_dropped": ("vl15_dropped_total", "Number of incoming VL15 packets dropped due to resource limitations.", 1),  # noqa: E501
}
# counters_ext/ (pre-4.5 mlx4) -> node_exporter's legacy_* metrics
IB_LEGACY: dict[str, tuple[str, str, int]] = {
    "port_multicast_rcv_packets": ("legacy_multicast_packets_received_total", "Number of multicast packets received", 1),  # noqa: E501
    "port_multicast_xmit_packets": ("legacy_multicast_packets_transmitted_total", "Number of multicast packets transmitted", 1),  # noqa: E501
    "port_rcv_data_64": ("legacy_data_received_bytes_total", "Number of data octets received on all links", 4),  # noqa: E501
    "port_rcv_packets_64": ("legacy_packets_received_total", "Number of data packets received on all links", 1),  # noqa: E501
    "port_unicast_rcv_packets": ("legacy_unicast_packets_received_total", "Number of unicast packets received", 1),  # noqa: E501
    "port_unicast_xmit_packets": ("legacy_unicast_packets_transmitted_total", "Number of unicast packets transmitted", 1),  # noqa: E501
    "port_xmit_data_64": ("legacy_data_transmitted_bytes_total", "Number of data octets transmitted on all links", 4),  # noqa: E501
    "port_xmit_packets_64": ("legacy_packets_transmitted_total", "Number of data packets received on all links", 1),  # noqa: E501
}
# dcgm-exporter: (field, type, help, attribute, scale)
DCGM: list[tuple[str, str, str, str, float]] = [
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "sm_clock_mhz", 1),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", "mem_clock_mhz", 1),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "temperature_c", 1),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "power_w", 1),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ).", "energy_mj", 1),  # noqa: E501
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "gpu_util_pct", 1),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", "mem_util_pct", 1),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "memory_free_bytes", 1 / MIB),  # noqa: E501
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "memory_used_bytes", 1 / MIB),  # noqa: E501
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", "last_xid", 1),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors.", "ecc_uncorrected_volatile", 1),  # noqa: E501
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors", "remapped_rows_uncorrectable", 1),  # noqa: E501
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors", "remapped_rows_correctable", 1),  # noqa: E501
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed", "remapped_rows_failure", 1),  # noqa: E501
]
DCGM_LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"]
PORT_LABELS = ["device", "port"]


def _dcgm_family(name: str, kind: str, doc: str) -> Metric:
    # dcgm-exporter's counters have no ``_total`` suffix; keep the name as-is.
    return Metric(name, doc, "counter" if kind == "counter" else "gauge")


def gpu_families(sample: NodeSample, mig: Sequence[MigInstance] = ()) -> Iterator[Metric]:
    """dcgm-exporter's GPU families; a MIG instance's framebuffer series join their
    family with its ``GPU_I_PROFILE``/``GPU_I_ID`` labels (``agents.migmetrics``)."""
    host = sample.host.hostname
    readable = [g for g in sample.gpus.gpus if g.uuid is not None]
    per_instance = mig_fb_samples(mig, sample.gpus.gpus, host)
    for name, kind, doc, attr, scale in DCGM:
        fam = _dcgm_family(name, kind, doc)
        for labels, mig_value in per_instance.get(name, []):
            fam.add_sample(name, labels, mig_value)
        for gpu in readable:
            value = getattr(gpu, attr)
            if attr == "last_xid" and value is None and not gpu.lost:
                value = 0
            if value is not None:
                fam.add_sample(name, dict(zip(DCGM_LABELS, _gpu_labels(gpu, host), strict=True)),
                               float(value) * scale)  # fmt: skip
        yield fam
    if mig:
        yield mig_info_family(mig, sample.gpus.gpus, host)
    yield from _gpu_health(sample)


def _gpu_labels(gpu: GpuSample, host: str) -> list[str]:
    return [str(gpu.index), gpu.uuid or "", gpu.pci_bus_id or "", f"nvidia{gpu.index}",
            gpu.name or "", host]  # fmt: skip


def _gpu_health(sample: NodeSample) -> Iterator[Metric]:
    healthy = GaugeMetricFamily("gpupool_gpu_healthy", "1 if the GPU is usable, 0 if lost or after a critical XID.", labels=["gpu", "UUID", "Hostname"])  # noqa: E501
    links = GaugeMetricFamily("gpupool_gpu_nvlink_active_links", "NVLinks in the active state.", labels=["gpu", "UUID", "Hostname"])  # noqa: E501
    for gpu in sample.gpus.gpus:
        labels = [str(gpu.index), gpu.uuid or "", sample.host.hostname]
        healthy.add_metric(labels, 1.0 if gpu.healthy else 0.0)
        if gpu.nvlink_active is not None:
            links.add_metric(labels, float(sum(gpu.nvlink_active)))
    yield healthy
    yield links
    up = GaugeMetricFamily("gpupool_nvml_up", "1 if NVML could be read.", labels=["Hostname"])
    up.add_metric([sample.host.hostname], 1.0 if sample.gpus.available else 0.0)
    yield up


def ib_families(devices: list[IbDevice]) -> Iterator[Metric]:
    info = GaugeMetricFamily(IB + "info", "Non-numeric data from /sys/class/infiniband/<device>, value is always 1.", labels=["board_id", "device", "firmware_version", "hca_type"])  # noqa: E501
    for dev in devices:
        info.add_metric([dev.board_id or "", dev.name, dev.fw_ver or "", dev.hca_type or ""], 1)
    yield info
    ports = [p for d in devices for p in d.ports]
    yield from _counter_group(ports, IB_COUNTERS, lambda p: p.counters)
    yield from _counter_group(ports, IB_LEGACY, lambda p: p.counters_ext)
    yield _port_gauge(ports, "state_id", "State of the InfiniBand port (0: no change, 1: down, 2: init, 3: armed, 4: active, 5: act defer)", lambda p: p.state_id)  # noqa: E501
    yield _port_gauge(ports, "physical_state_id", "Physical state of the InfiniBand port (0: no change, 1: sleep, 2: polling, 3: disable, 4: shift, 5: link up, 6: link error recover, 7: phytest)", lambda p: p.phys_state_id)  # noqa: E501
    yield _port_gauge(ports, "rate_bytes_per_second", "Maximum signal transfer rate", lambda p: None if p.rate_gbps is None else p.rate_gbps * 125_000_000)  # noqa: E501
    yield from _ib_extras(ports)


def _counter_group(
    ports: list[IbPort], table: dict[str, tuple[str, str, int]],
    get: Callable[[IbPort], dict[str, int]],
) -> Iterator[Metric]:  # fmt: skip
    for file, (metric, doc, scale) in sorted(table.items(), key=lambda kv: kv[1][0]):
        fam = CounterMetricFamily(IB + metric, doc, labels=PORT_LABELS)
        for port in ports:
            value = get(port).get(file)
            if value is not None:
                fam.add_metric([port.device, str(port.port)], float(value * scale))
        if fam.samples:
            yield fam


def _port_gauge(
    ports: list[IbPort], name: str, doc: str, fn: Callable[[IbPort], float | int | None]
) -> Metric:
    fam = GaugeMetricFamily(IB + name, doc, labels=PORT_LABELS)
    for port in ports:
        value = fn(port)
        if value is not None:
            fam.add_metric([port.device, str(port.port)], float(value))
    return fam


def _ib_extras(ports: list[IbPort]) -> Iterator[Metric]:
    sat = GaugeMetricFamily("gpupool_infiniband_counter_saturated", "1 when a PMA counter is stuck at its maximum: its value and rate are unknown since then.", labels=["device", "port", "counter"])  # noqa: E501
    hw = CounterMetricFamily("gpupool_infiniband_hw_counter", "Driver-specific hw_counters/ value.", labels=["device", "port", "counter"])  # noqa: E501
    unavailable = GaugeMetricFamily("gpupool_infiniband_counter_unavailable", "1 when a counter could not be read (N/A (no PMA), EINVAL ...).", labels=["device", "port", "counter"])  # noqa: E501
    guid = GaugeMetricFamily("gpupool_infiniband_port_info", "Port GUID and link layer, value is always 1.", labels=["device", "port", "port_guid", "link_layer"])  # noqa: E501
    for p in ports:
        for counter in p.saturated:
            sat.add_metric([p.device, str(p.port), counter], 1.0)
        for counter, value in p.hw_counters.items():
            hw.add_metric([p.device, str(p.port), counter], float(value))
        for counter in p.unavailable:
            unavailable.add_metric([p.device, str(p.port), counter], 1.0)
        guid.add_metric([p.device, str(p.port), p.port_guid or "", p.link_layer or ""], 1.0)
    yield from (sat, hw, unavailable, guid)


class SampleCollector(Collector):
    """Exposes the latest :class:`NodeSample` (set by the agent loop)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sample: NodeSample | None = None
        self._mig: list[MigInstance] = []

    def set(self, sample: NodeSample, mig: Sequence[MigInstance] = ()) -> None:
        """The latest sample and the MIG instances read with it."""
        with self._lock:
            self._sample, self._mig = sample, list(mig)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            sample, mig = self._sample, self._mig
        if sample is None:
            return
        yield from gpu_families(sample, mig)
        yield from ib_families(sample.ib)


_COUNTER_TYPE = re.compile(r"^# (HELP|TYPE) (DCGM_FI_\w+)_total ", re.MULTILINE)


def render(registry: CollectorRegistry) -> bytes:
    """Text format 0.0.4; dcgm counters keep dcgm-exporter's names (no ``_total``)."""
    text = generate_latest(registry).decode()
    return _COUNTER_TYPE.sub(r"# \1 \2 ", text).encode()


def render_sample(sample: NodeSample) -> bytes:
    registry = CollectorRegistry()
    coll = SampleCollector()
    coll.set(sample)
    registry.register(coll)
    return render(registry)


class MetricsServer:
    """``GET /metrics`` on a background thread (port 0 picks a free port)."""

    def __init__(self, registry: CollectorRegistry, host: str = "127.0.0.1", port: int = 9400):
        registry_ = registry

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = render(registry_)
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
