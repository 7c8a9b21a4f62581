"""What we know about GPU models: memory and the usual NVLink layout of their servers."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuModel:
    name: str
    display: str
    memory_mib: int
    nvlink: str  # "all": one NVLink domain per node (HGX); "pairs"; "none"


CATALOG: dict[str, GpuModel] = {m.name: m for m in [
    GpuModel("H200", "NVIDIA H200 141GB HBM3e", 144384, "all"),
    GpuModel("H100", "NVIDIA H100 80GB HBM3", 81559, "all"),
    GpuModel("A100", "NVIDIA A100-SXM4-80GB", 81920, "all"),
    GpuModel("L40S", "NVIDIA L40S", 46068, "none"),
    GpuModel("V100M32", "Tesla V100-SXM2-32GB", 32768, "all"),
    GpuModel("V100M16", "Tesla V100-SXM2-16GB", 16384, "all"),
    GpuModel("A10", "NVIDIA A10", 23028, "none"),
    GpuModel("T4", "Tesla T4", 15360, "none"),
]}

NVLINK_LAYOUTS = ("all", "pairs", "none")


def nvlink_domain(layout: str, index: int) -> int | None:
    """The NVLink domain number of GPU ``index`` under ``layout``."""
    if layout == "all":
        return 0
    if layout == "pairs":
        return index // 2
    return None
