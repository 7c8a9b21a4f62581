"""FGD's workload variants of openb, derived from the default trace (``--variant``).

FGD (Weng et al., ATC '23) evaluates openb files with more multi-GPU pods
(``openb_pod_list_multigpu{20,50}.csv``) and more GPU-sharing pods
(``openb_pod_list_gpushare{40,100}.csv``). Those files are research-use only and how they
were drawn is not in the sources available here, so they are not copied: a variant is
built from the default pods by re-drawing a pod's resource shape so that ``share`` of the
GPU pods are multi-GPU (``multigpu``) or fractional (``gpushare``). Reading of the names
(an assumption, see ADR 0237): the number is the percentage of GPU pods, by count.
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
    the other GPU pods). Draws are seeded per pod name, so resampled clones agree."""
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
        d = donors[rng.randrange(len(donors))]
        result.append(replace(p, cpu_milli=d.cpu_milli, memory_mib=d.memory_mib,
                              num_gpu=d.num_gpu, gpu_milli=d.gpu_milli, models=d.models))
    return result


def share(pods: Sequence[Pod], name: str) -> float:
    """Share of the GPU pods in the variant's class."""
    kind = VARIANTS[name][0]
    gpu = [p for p in pods if p.num_gpu]
    return sum(in_class(kind, p) for p in gpu) / len(gpu) if gpu else 0.0
