"""Fragmentation of a node's free GPU capacity against a typical task mix (FGD, ATC'23).

For one task type, the free GPU milli of a node is a *fragment* when the task cannot use
it: the task cannot run on the node at all (model, CPU, not enough GPUs with room), or a
GPU's free share is smaller than the task's per-GPU demand. CPU-only tasks count the
whole free capacity. The node's fragmentation is the expectation over the task mix.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from scheduler.model import TaskType
from scheduler.nodestate import NodeKey

FragKey = tuple[str, int, tuple[int, ...]]

TYPICAL_COVERAGE = 0.95


def typical_task_mix(
    tasks: Iterable[tuple[int, int, int, frozenset[str]]], coverage: float = TYPICAL_COVERAGE,
) -> tuple[TaskType, ...]:
    """Most frequent ``(cpu, gpu_milli, gpus, models)`` types covering ``coverage``.

    Types are sorted by count (then by value, for determinism) and renormalised.
    """
    return mix_of_counts(Counter(tasks), coverage)


def mix_of_counts(
    counts: Mapping[tuple[int, int, int, frozenset[str]], int],
    coverage: float = TYPICAL_COVERAGE,
) -> tuple[TaskType, ...]:
    """:func:`typical_task_mix` of tasks already counted by type (the warm score context
    keeps the counts of running leases between passes)."""
    counts = {task: n for task, n in counts.items() if n > 0}
    total = sum(counts.values())
    if not total:
        return ()
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0][0], kv[0][1], kv[0][2],
                                                     sorted(kv[0][3])))
    chosen: list[tuple[tuple[int, int, int, frozenset[str]], int]] = []
    cum = 0
    for item in ranked:
        if cum >= coverage * total:
            break
        chosen.append(item)
        cum += item[1]
    return tuple(TaskType(c, g, n, m, cnt / cum) for (c, g, n, m), cnt in chosen)


def model_pressure(mix: Sequence[TaskType], capacity: Mapping[str, int]) -> dict[str, float]:
    """How much of the mix's GPU demand only some models can serve, per model, against
    that model's share of capacity: each model-constrained type's share of the mix's GPU
    demand, over the capacity share of the models it accepts, summed over the types that
    accept the model. 1.0: the constrained demand alone would fill the model's share;
    0: no type needs this model (also for every model when no type names one).
    ``capacity``: GPUs per model."""
    total_cap = sum(capacity.values())
    demand = sum(t.weight * t.gpus * t.gpu_milli for t in mix)
    out = dict.fromkeys(capacity, 0.0)
    if not total_cap or not demand:
        return out
    for t in mix:
        accepted = sum(capacity.get(m, 0) for m in t.models)
        if not t.models or not accepted or not t.gpu_milli:
            continue
        share = t.weight * t.gpus * t.gpu_milli / demand / (accepted / total_cap)
        for m in t.models:
            if m in out:
                out[m] += share
    return out


class FragModel:
    """Memoised fragmentation per node state for a fixed task mix."""

    def __init__(self, mix: Sequence[TaskType]) -> None:
        self.mix = tuple(mix)
        self._cache: dict[FragKey, float] = {}
        self.cpu_per_milli = cpu_per_gpu_milli(self.mix)

    def frag(self, key: NodeKey) -> float:
        frees = tuple(sorted((v for d in key[5] for v in d), reverse=True))
        fkey: FragKey = (key[0], key[3], frees)
        hit = self._cache.get(fkey)
        if hit is None:
            hit = node_fragmentation(key[0], key[3], frees, self.mix)
            if len(self._cache) > 400_000:
                self._cache.clear()
            self._cache[fkey] = hit
        return hit


def cpu_per_gpu_milli(mix: Sequence[TaskType]) -> float:
    """CPU milli the task mix asks per GPU milli (GPU tasks only, mix-weighted); 0 when
    the mix has no GPU task."""
    gpu = sum(t.weight * t.gpus * t.gpu_milli for t in mix if t.gpu_milli)
    cpu = sum(t.weight * t.cpu_milli for t in mix if t.gpu_milli)
    return cpu / gpu if gpu else 0.0


def cpu_stranded(cpu_free: int, gpu_free_milli: int, cpu_per_milli: float) -> float:
    """Free GPU milli that the node's free CPU cannot feed at the mix's CPU/GPU ratio."""
    if cpu_per_milli <= 0 or not gpu_free_milli:
        return 0.0
    return max(0.0, gpu_free_milli - cpu_free / cpu_per_milli)


def node_fragmentation(
    model: str, cpu_free: int, frees: Sequence[int], mix: Sequence[TaskType],
) -> float:
    total = sum(frees)
    if not total:
        return 0.0
    out = 0.0
    for t in mix:
        out += t.weight * task_fragment(model, cpu_free, frees, total, t)
    return out


def task_fragment(
    model: str, cpu_free: int, frees: Sequence[int], total: int, t: TaskType,
) -> int:
    """Free GPU milli on the node that task type ``t`` cannot use."""
    if t.gpu_milli == 0 or (t.models and model not in t.models) or cpu_free < t.cpu_milli:
        return total
    usable = 0
    unusable = 0
    for v in frees:
        if v >= t.gpu_milli:
            usable += 1
        else:
            unusable += v
    return unusable if usable >= t.gpus else total
