"""MIG (Multi-Instance GPU) geometry: the profiles of each GPU model, where each may sit,
and how fragmented a GPU's free slices are (docs/scheduler.md, "MIG"; ADR 0210).

A MIG-capable A100/H100/H200 has 8 memory slices and 7 compute slices. A GPU instance of a
profile occupies ``memory_slices`` consecutive memory slices from one of the profile's valid
start slots (its *placements*, as ``nvidia-smi mig -lgipp`` and
``nvmlDeviceGetGpuInstancePossiblePlacements_v2`` list them); two instances never share a
memory slice. A slot range that is free is not enough: ``3g.40gb`` starts only at 0 or 4,
and ``1g.10gb`` never at 7, so one ``3g.40gb`` at 0 leaves room for three ``1g.10gb``
(4, 5, 6), not four. The tables are NVIDIA's MIG user guide ("Supported MIG Profiles").

The fragmentation score is FGD's idea (scheduler/frag.py) on slices: for each profile of a
demand mix, the free memory slices that no free placement of the profile could cover; the
score is the expectation over the mix. Placing where the score grows least keeps the large
profiles placeable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

MEMORY_SLICES = 8
COMPUTE_SLICES = 7

# NVML_GPU_INSTANCE_PROFILE_* (nvml.h): the ``profile`` argument of
# nvmlDeviceGetGpuInstanceProfileInfo; its answer's ``id`` is the profile id below.
NVML_PROFILE_1_SLICE = 0x0
NVML_PROFILE_2_SLICE = 0x1
NVML_PROFILE_3_SLICE = 0x2
NVML_PROFILE_4_SLICE = 0x3
NVML_PROFILE_7_SLICE = 0x4
NVML_PROFILE_1_SLICE_REV1 = 0x7  # 1g with media extensions (+me)
NVML_PROFILE_1_SLICE_REV2 = 0x9  # 1g with two memory slices

Range = tuple[int, int]  # (start, size) in memory slices, like nvmlGpuInstancePlacement_t
Instance = tuple[str, int]  # (profile name, start)


@dataclass(frozen=True)
class MigProfile:
    name: str  # "1g.10gb"
    profile_id: int  # the GPU instance profile id (nvidia-smi "ID", NVML info.id)
    nvml_profile: int  # the NVML_GPU_INSTANCE_PROFILE_* constant
    compute_slices: int
    memory_slices: int  # of MEMORY_SLICES: the placement size
    memory_gb: int  # nominal, as the name says
    starts: tuple[int, ...]  # valid start slots
    max_instances: int
    media: bool = False  # "+me": the GPU's media engines; one at a time

    @property
    def size(self) -> int:
        return self.memory_slices

    def placements(self) -> tuple[Range, ...]:
        return tuple((start, self.memory_slices) for start in self.starts)


@dataclass(frozen=True)
class MigModel:
    name: str  # as the inventory names models (portal/inventory/catalog.py)
    nvml_names: tuple[str, ...]  # nvmlDeviceGetName of the boards with this geometry
    profiles: tuple[MigProfile, ...]

    def profile(self, name: str) -> MigProfile:
        for p in self.profiles:
            if p.name == name:
                return p
        raise KeyError(f"{self.name} has no MIG profile {name!r}")

    def by_id(self, profile_id: int) -> MigProfile:
        return next(p for p in self.profiles if p.profile_id == profile_id)


def _family(one: int, two: int, four: int, eight: int) -> tuple[MigProfile, ...]:
    """The A100/H100/H200 geometry (one table in the guide; the memory differs): the GB of
    the 1-, 2-, 4- and 8-memory-slice profiles."""
    return (
        MigProfile(f"1g.{one}gb", 19, NVML_PROFILE_1_SLICE, 1, 1, one, (0, 1, 2, 3, 4, 5, 6), 7),
        MigProfile(f"1g.{one}gb+me", 20, NVML_PROFILE_1_SLICE_REV1, 1, 1, one,
                   (0, 1, 2, 3, 4, 5, 6), 1, media=True),
        MigProfile(f"1g.{two}gb", 15, NVML_PROFILE_1_SLICE_REV2, 1, 2, two, (0, 2, 4, 6), 4),
        MigProfile(f"2g.{two}gb", 14, NVML_PROFILE_2_SLICE, 2, 2, two, (0, 2, 4), 3),
        MigProfile(f"3g.{four}gb", 9, NVML_PROFILE_3_SLICE, 3, 4, four, (0, 4), 2),
        MigProfile(f"4g.{four}gb", 5, NVML_PROFILE_4_SLICE, 4, 4, four, (0,), 1),
        MigProfile(f"7g.{eight}gb", 0, NVML_PROFILE_7_SLICE, 7, 8, eight, (0,), 1),
    )


CATALOGUE: dict[str, MigModel] = {m.name: m for m in (
    MigModel("A100-40GB", ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"),
             _family(5, 10, 20, 40)),
    MigModel("A100", ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"),
             _family(10, 20, 40, 80)),
    MigModel("H100", ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe"),
             _family(10, 20, 40, 80)),
    MigModel("H200", ("NVIDIA H200", "NVIDIA H200 141GB HBM3e", "NVIDIA H200 NVL"),
             _family(18, 35, 71, 141)),
)}


def model_for(name: str) -> MigModel | None:
    """The MIG geometry of a model by inventory name or NVML board name; ``None``: no MIG."""
    if name in CATALOGUE:
        return CATALOGUE[name]
    return next((m for m in CATALOGUE.values() if name in m.nvml_names), None)


def _mask(used: Iterable[Range]) -> int:
    mask = 0
    for start, size in used:
        mask |= ((1 << size) - 1) << start
    return mask


def _fits(start: int, size: int, mask: int) -> bool:
    return start + size <= MEMORY_SLICES and not (((1 << size) - 1) << start) & mask


def free_starts(profile: MigProfile, used: Iterable[Range]) -> tuple[int, ...]:
    """The valid start slots of ``profile`` whose slices no used range touches."""
    mask = _mask(used)
    return tuple(s for s in profile.starts if _fits(s, profile.memory_slices, mask))


def ranges(model: MigModel, layout: Iterable[Instance]) -> list[Range]:
    return [(start, model.profile(name).memory_slices) for name, start in layout]


def can_add(model: MigModel, profile: MigProfile, start: int,
            layout: Sequence[Instance]) -> bool:
    """Whether an instance of ``profile`` at ``start`` may join ``layout``: a valid start,
    no shared slice, the profile's instance limit, the compute slices."""
    if start not in profile.starts:
        return False
    if sum(1 for name, _ in layout if name == profile.name) >= profile.max_instances:
        return False
    compute = sum(model.profile(name).compute_slices for name, _ in layout)
    if compute + profile.compute_slices > COMPUTE_SLICES:
        return False
    return _fits(start, profile.memory_slices, _mask(ranges(model, layout)))


def layout_valid(model: MigModel, layout: Sequence[Instance]) -> bool:
    """Whether every instance of ``layout`` could be created, in this order or any."""
    try:
        return all(can_add(model, model.profile(name), start, layout[:i])
                   for i, (name, start) in enumerate(layout))
    except KeyError:
        return False


def default_demand(model: MigModel) -> dict[str, float]:
    """Every profile but the media ones, equally likely."""
    plain = [p.name for p in model.profiles if not p.media]
    return {name: 1.0 / len(plain) for name in plain}


def profile_fragment(profile: MigProfile, used: Sequence[Range]) -> int:
    """Free memory slices that no free placement of ``profile`` covers (all of them when
    it fits nowhere)."""
    mask = _mask(used)
    covered = _mask((s, profile.memory_slices) for s in free_starts(profile, used))
    free = ~mask & ((1 << MEMORY_SLICES) - 1)
    return bin(free & ~covered).count("1")


def frag_score(model: MigModel, used: Sequence[Range],
               demand: Mapping[str, float] | None = None) -> float:
    """Expected free slices unusable by the next instance, over ``demand`` (name → weight)."""
    weights = demand if demand is not None else default_demand(model)
    total = sum(weights.values())
    if not total:
        return 0.0
    return sum(w * profile_fragment(model.profile(name), used)
               for name, w in weights.items()) / total


def place(model: MigModel, profile: MigProfile | str, layout: Sequence[Instance],
          demand: Mapping[str, float] | None = None) -> int | None:
    """The start for a new ``profile`` instance that leaves the lowest fragmentation
    (ties: the highest start, keeping slot 0, where the large profiles start, free longest);
    ``None``: it fits nowhere."""
    p = model.profile(profile) if isinstance(profile, str) else profile
    used = ranges(model, layout)
    best: tuple[float, int] | None = None
    for start in p.starts:
        if not can_add(model, p, start, layout):
            continue
        score = frag_score(model, [*used, (start, p.memory_slices)], demand)
        if best is None or (score, -start) < (best[0], -best[1]):
            best = (score, start)
    return None if best is None else best[1]
