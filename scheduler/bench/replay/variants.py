"""FGD's workload variants of openb, derived from the default trace (``--variant``).

FGD (Weng et al., ATC '23) evaluates openb files with more multi-GPU pods
(``openb_pod_list_multigpu{20,50}.csv``) and more GPU-sharing pods
(``openb_pod_list_gpushare{40,100}.csv``). Those files are research-use only and how they
were drawn is not in the sources available here, so they are not copied: a variant is
built from the default pods by re-drawing a pod's resource shape so that ``share`` of the
GPU pods are multi-GPU (``multigpu``) or fractional (``gpushare``). Reading of the names
(an assumption, see ADR 0237): the number is the percentage of GPU pods, by count.

``multigpu20-fgd`` / ``multigpu50-fgd`` follow FGD's own construction as its published
files show it (ADR 0245): the 8,152 default pods unchanged, then multi-GPU pods drawn from
the default's multi-GPU pods appended until they request the share of all GPU milli
(``openb_pod_list_multigpu50.csv``: the default pods, then 909 appended multi-GPU pods;
this construction appends 878 on average, 163 for 20 %). The draws are ours (seeded by
the variant's name), not FGD's pods. ``gpushare40-fgd`` / ``gpushare100-fgd`` keep the
pods (as FGD's ``gpushare40.csv`` does: the 8,152 names) and re-draw whole-GPU pods as
fractional ones until those request the share of all GPU milli.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Sequence
from dataclasses import replace

from scheduler.bench.replay.trace import Pod
from scheduler.model import MILLI

VARIANTS: dict[str, tuple[str, float]] = {
    "multigpu20": ("multigpu", 0.20),
    "multigpu50": ("multigpu", 0.50),
    "gpushare40": ("gpushare", 0.40),
    "gpushare100": ("gpushare", 1.00),
}

# Appended like FGD's files: (class, share of requested GPU milli the class reaches)
APPENDED: dict[str, tuple[str, float]] = {
    "multigpu20-fgd": ("multigpu", 0.20),
    "multigpu50-fgd": ("multigpu", 0.50),
}
# Re-shaped like FGD's gpushare files (the 8,152 pods, their shapes re-drawn) until the
# class requests the share of all requested GPU milli (not a share of pods by count)
RESHAPED: dict[str, tuple[str, float]] = {
    "gpushare40-fgd": ("gpushare", 0.40),
    "gpushare100-fgd": ("gpushare", 1.00),
}
NAMES = (*VARIANTS, *APPENDED, *RESHAPED)

_CLASS: dict[str, Callable[[Pod], bool]] = {
    "multigpu": lambda p: p.num_gpu > 1,
    "gpushare": lambda p: p.num_gpu == 1 and 0 < p.gpu_milli < MILLI,
}


def in_class(kind: str, pod: Pod) -> bool:
    return _CLASS[kind](pod)


def apply_variant(pods: Sequence[Pod], name: str) -> list[Pod]:
    """The pods with GPU pods re-shaped so that the variant's share of them is in its
    class: a pod moved into (or out of) the class takes the cpu, memory, GPU count,
    GPU milli and model of a donor pod drawn from the default pods of that class (or of
    the other GPU pods). Draws are seeded per pod name, so resampled clones agree.
    An ``APPENDED`` variant keeps the pods and appends (``append_class``); a
    ``RESHAPED`` one re-draws pods by requested GPU (``reshape_until``)."""
    if name in APPENDED:
        return append_class(pods, *APPENDED[name], seed=name)
    if name in RESHAPED:
        return reshape_until(pods, *RESHAPED[name], seed=name)
    kind, target = VARIANTS[name]
    gpu = [p for p in pods if p.num_gpu]
    inside = [p for p in gpu if in_class(kind, p)]
    outside = [p for p in gpu if not in_class(kind, p)]
    if not gpu or not inside:
        return list(pods)
    now = len(inside) / len(gpu)
    into = (target - now) / (1 - now) if target > now and now < 1 else 0.0
    out_of = (now - target) / now if target < now else 0.0
    result = []
    for p in pods:
        if not p.num_gpu:
            result.append(p)
            continue
        rng = random.Random(zlib.crc32(f"{name}:{p.name}".encode()))
        donors: list[Pod] = []
        if in_class(kind, p):
            donors = outside if outside and rng.random() < out_of else []
        elif rng.random() < into:
            donors = inside
        if not donors:
            result.append(p)
            continue
        result.append(_shaped_as(p, donors[rng.randrange(len(donors))]))
    return result


def _shaped_as(pod: Pod, donor: Pod) -> Pod:
    """``pod`` (its name and times) with the donor's cpu, memory, GPU count, milli and model."""
    return replace(pod, cpu_milli=donor.cpu_milli, memory_mib=donor.memory_mib,
                   num_gpu=donor.num_gpu, gpu_milli=donor.gpu_milli, models=donor.models)


def append_class(pods: Sequence[Pod], kind: str, target: float, seed: str) -> list[Pod]:
    """The pods, then copies of pods of ``kind`` drawn uniformly (seeded by ``seed``)
    until that class requests ``target`` of all requested GPU milli; each copy is named
    ``{seed}-{k}`` (unique, so resampling treats it as an original)."""
    donors = [p for p in pods if p.num_gpu and in_class(kind, p)]
    total = sum(p.gpu_request for p in pods)
    mine = sum(p.gpu_request for p in donors)
    out = list(pods)
    if not donors or not 0 < target < 1:
        return out
    rng = random.Random(zlib.crc32(seed.encode()))
    k = 0
    while mine < target * total:
        d = donors[rng.randrange(len(donors))]
        out.append(replace(d, name=f"{seed}-{k}"))
        k += 1
        mine += d.gpu_request
        total += d.gpu_request
    return out


def reshape_until(pods: Sequence[Pod], kind: str, target: float, seed: str) -> list[Pod]:
    """The pods, GPU pods outside ``kind`` re-drawn one by one (in a seeded order) as a
    donor of ``kind`` (its cpu, memory, GPU count, milli and model) until that class
    requests ``target`` of all requested GPU milli; names, count and order are kept."""
    out = list(pods)
    donors = [p for p in pods if p.num_gpu and in_class(kind, p)]
    if not donors:
        return out
    rng = random.Random(zlib.crc32(seed.encode()))
    order = [i for i, p in enumerate(out) if p.num_gpu and not in_class(kind, p)]
    rng.shuffle(order)
    total = sum(p.gpu_request for p in out)
    mine = sum(p.gpu_request for p in donors)
    for i in order:
        if mine >= target * total:
            break
        d = donors[rng.randrange(len(donors))]
        total += d.gpu_request - out[i].gpu_request
        mine += d.gpu_request
        out[i] = _shaped_as(out[i], d)
    return out


def requested_share(pods: Sequence[Pod], kind: str) -> float:
    """Share of all requested GPU milli that pods of ``kind`` request."""
    total = sum(p.gpu_request for p in pods)
    return sum(p.gpu_request for p in pods if in_class(kind, p)) / total if total else 0.0


def share(pods: Sequence[Pod], name: str) -> float:
    """Share of the GPU pods in the variant's class."""
    kind = VARIANTS[name][0]
    gpu = [p for p in pods if p.num_gpu]
    return sum(in_class(kind, p) for p in gpu) / len(gpu) if gpu else 0.0
