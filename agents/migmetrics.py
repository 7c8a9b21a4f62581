"""Prometheus series for MIG instances, labelled as dcgm-exporter labels them.

dcgm-exporter keeps a MIG instance's series on its parent GPU's labels (``gpu``, ``UUID``
of the parent, ``pci_bus_id``, ``device``, ``modelName``) and adds ``GPU_I_PROFILE`` and
``GPU_I_ID`` before ``Hostname``. Framebuffer use is what NVML reads per MIG device; the
MIG UUID (for ``CUDA_VISIBLE_DEVICES``) and placement are in ``gpupool_mig_instance_info``.
:class:`MigCollector` serves them on a registry of its own; the agent's ``/metrics``
adds them to ``SampleCollector``'s FB families (``SampleCollector.set(sample, mig=…)``:
one family per name, as a registry refuses two collectors of one name).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agents.nvml.collector import GpuSample
from agents.nvml.mig import MigInstance

MIB = 1024 * 1024
MIG_LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "GPU_I_PROFILE", "GPU_I_ID",
              "Hostname"]
INFO_LABELS = ["gpu", "UUID", "GPU_I_PROFILE", "GPU_I_ID", "mig_uuid", "placement_start",
               "placement_size", "Hostname"]


def _labels(inst: MigInstance, gpu: GpuSample | None, host: str) -> list[str]:
    return [str(inst.gpu_index), (gpu.uuid if gpu else None) or "",
            (gpu.pci_bus_id if gpu else None) or "", f"nvidia{inst.gpu_index}",
            (gpu.name if gpu else None) or "", inst.profile, str(inst.gpu_instance_id), host]


Samples = dict[str, list[tuple[dict[str, str], float]]]


def mig_fb_samples(instances: Sequence[MigInstance], gpus: Sequence[GpuSample],
                   host: str) -> Samples:
    """Framebuffer use per MIG instance, by dcgm-exporter field name, with its labels: the
    agent adds them to its GPU families of the same names (one family per name)."""
    by_index = {g.index: g for g in gpus}
    out: Samples = {"DCGM_FI_DEV_FB_FREE": [], "DCGM_FI_DEV_FB_USED": []}
    for inst in instances:
        if inst.memory_total_bytes is None or inst.memory_used_bytes is None:
            continue
        labels = dict(zip(MIG_LABELS, _labels(inst, by_index.get(inst.gpu_index), host),
                          strict=True))
        out["DCGM_FI_DEV_FB_USED"].append((labels, inst.memory_used_bytes / MIB))
        out["DCGM_FI_DEV_FB_FREE"].append(
            (labels, (inst.memory_total_bytes - inst.memory_used_bytes) / MIB))
    return out


def mig_info_family(instances: Sequence[MigInstance], gpus: Sequence[GpuSample],
                    host: str) -> Metric:
    """``gpupool_mig_instance_info``: each instance's MIG UUID and placement."""
    by_index = {g.index: g for g in gpus}
    info = GaugeMetricFamily("gpupool_mig_instance_info", "A MIG GPU instance, value is always 1.", labels=INFO_LABELS)  # noqa: E501
    for inst in instances:
        gpu = by_index.get(inst.gpu_index)
        info.add_metric([str(inst.gpu_index), (gpu.uuid if gpu else None) or "", inst.profile,
                         str(inst.gpu_instance_id), inst.uuid or "", str(inst.start),
                         str(inst.size), host], 1.0)
    return info


def mig_families(instances: Sequence[MigInstance], gpus: Sequence[GpuSample],
                 host: str) -> Iterator[Metric]:
    free = GaugeMetricFamily("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).",
                             labels=MIG_LABELS)
    used = GaugeMetricFamily("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).",
                             labels=MIG_LABELS)
    samples = mig_fb_samples(instances, gpus, host)
    for family in (free, used):
        for labels, value in samples[family.name]:
            family.add_sample(family.name, labels, value)
    yield from (free, used, mig_info_family(instances, gpus, host))


class MigCollector(Collector):
    """Exposes the latest MIG instances (set by whoever reconciles or lists them)."""

    def __init__(self, host: str) -> None:
        self._lock = threading.Lock()
        self._host = host
        self._state: tuple[list[MigInstance], list[GpuSample]] = ([], [])

    def set(self, instances: Sequence[MigInstance], gpus: Sequence[GpuSample]) -> None:
        with self._lock:
            self._state = (list(instances), list(gpus))

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            instances, gpus = self._state
        if instances:
            yield from mig_families(instances, gpus, self._host)
