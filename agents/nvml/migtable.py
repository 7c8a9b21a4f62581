"""MIG profiles per board, for the fake NVML (agents/ may not import scheduler/).

The same table as ``scheduler/mig.py`` (NVIDIA's MIG user guide, "Supported MIG Profiles");
``tests/agents/test_fakemig.py`` fails when the two differ. The real agent never reads it:
it asks NVML (``nvmlDeviceGetGpuInstanceProfileInfo``, ``...PossiblePlacements``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BoardProfile:
    name: str
    profile_id: int  # GPU instance profile id (NVML info.id)
    nvml_profile: int  # NVML_GPU_INSTANCE_PROFILE_* constant
    compute_slices: int
    memory_slices: int  # of 8
    starts: tuple[int, ...]
    max_instances: int


def _family(one: int, two: int, four: int, eight: int) -> tuple[BoardProfile, ...]:
    anywhere_but_7 = (0, 1, 2, 3, 4, 5, 6)
    return (
        BoardProfile(f"1g.{one}gb", 19, 0x0, 1, 1, anywhere_but_7, 7),
        BoardProfile(f"1g.{one}gb+me", 20, 0x7, 1, 1, anywhere_but_7, 1),
        BoardProfile(f"1g.{two}gb", 15, 0x9, 1, 2, (0, 2, 4, 6), 4),
        BoardProfile(f"2g.{two}gb", 14, 0x1, 2, 2, (0, 2, 4), 3),
        BoardProfile(f"3g.{four}gb", 9, 0x2, 3, 4, (0, 4), 2),
        BoardProfile(f"4g.{four}gb", 5, 0x3, 4, 4, (0,), 1),
        BoardProfile(f"7g.{eight}gb", 0, 0x4, 7, 8, (0,), 1),
    )


_A100_40, _80GB, _H200 = _family(5, 10, 20, 40), _family(10, 20, 40, 80), _family(18, 35, 71, 141)
# nvmlDeviceGetName -> profiles
BOARDS: dict[str, tuple[BoardProfile, ...]] = {
    "NVIDIA A100-SXM4-40GB": _A100_40,
    "NVIDIA A100-PCIE-40GB": _A100_40,
    "NVIDIA A100-SXM4-80GB": _80GB,
    "NVIDIA A100 80GB PCIe": _80GB,
    "NVIDIA H100 80GB HBM3": _80GB,
    "NVIDIA H100 PCIe": _80GB,
    "NVIDIA H200": _H200,
    "NVIDIA H200 141GB HBM3e": _H200,
    "NVIDIA H200 NVL": _H200,
}
