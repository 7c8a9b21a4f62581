"""Reading the openb trace CSVs and resampling pods as in the FGD paper."""

from __future__ import annotations

import csv
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from scheduler.frag import FragModel, typical_task_mix
from scheduler.model import MILLI, Gpu, Node, TaskType
from scheduler.nodestate import Shape
from scheduler.scores import ScoreContext


@dataclass(frozen=True)
class Pod:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    models: frozenset[str]
    creation_time: int = 0
    deletion_time: int | None = None

    @property
    def gpu_request(self) -> int:
        """Requested GPU milli (Σ num_gpu x gpu_milli)."""
        return self.num_gpu * self.gpu_milli

    @property
    def shape(self) -> Shape:
        milli = self.gpu_milli if self.num_gpu == 1 and 0 < self.gpu_milli < MILLI else MILLI
        return Shape(self.models, self.num_gpu, milli, self.cpu_milli, self.memory_mib)

    @property
    def task_type(self) -> tuple[int, int, int, frozenset[str]]:
        return (self.cpu_milli, self.gpu_milli if self.num_gpu else 0, self.num_gpu,
                self.models)


def _int(value: str, default: int = 0) -> int:
    value = value.strip()
    return int(float(value)) if value else default


def load_nodes(path: str | Path) -> tuple[Node, ...]:
    """``sn,cpu_milli,memory_mib,gpu,model`` rows; all GPUs of a node in one domain."""
    with open(path, newline="") as fh:
        return tuple(
            Node(
                name=row["sn"],
                cpu_milli=_int(row["cpu_milli"]),
                memory_mib=_int(row["memory_mib"]),
                gpus=tuple(Gpu(i, row["model"]) for i in range(_int(row["gpu"]))),
            )
            for row in csv.DictReader(fh)
        )


def load_pods(path: str | Path) -> tuple[Pod, ...]:
    with open(path, newline="") as fh:
        return tuple(_pod(row) for row in csv.DictReader(fh))


def _pod(row: dict[str, str]) -> Pod:
    spec = row.get("gpu_spec", "").strip()
    deletion = row.get("deletion_time", "").strip()
    return Pod(
        name=row["name"],
        cpu_milli=_int(row["cpu_milli"]),
        memory_mib=_int(row["memory_mib"]),
        num_gpu=_int(row["num_gpu"]),
        gpu_milli=_int(row["gpu_milli"]),
        models=frozenset(spec.split("|")) if spec else frozenset(),
        creation_time=_int(row.get("creation_time", "")),
        deletion_time=_int(deletion) if deletion else None,
    )


def capacity_milli(nodes: Sequence[Node]) -> int:
    return sum(MILLI for n in nodes for g in n.gpus if g.healthy)


def tune(pods: Sequence[Pod], ratio: float, seed: int, capacity: int) -> list[Pod]:
    """Shuffle the originals, then append uniform draws (with replacement) while the
    total requested GPU stays within ``ratio`` x capacity (the paper's workload)."""
    rng = random.Random(seed)
    out = list(pods)
    rng.shuffle(out)
    total = sum(p.gpu_request for p in out)
    limit = ratio * capacity
    while True:
        pod = pods[rng.randrange(len(pods))]
        if total + pod.gpu_request > limit:
            return out
        out.append(pod)
        total += pod.gpu_request


def task_mix(pods: Sequence[Pod]) -> tuple[TaskType, ...]:
    return typical_task_mix(p.task_type for p in pods)


def score_context(nodes: Sequence[Node], pods: Sequence[Pod]) -> ScoreContext:
    """Context for the trace: task mix from the original pods, cluster maxima."""
    mix = task_mix(pods)
    demand: dict[str, float] = {}
    for n in nodes:
        demand.setdefault(n.model, sum(t.weight for t in mix if t.models and
                                       n.model in t.models))
    return ScoreContext(
        frag=FragModel(mix),
        max_cpu=max((n.cpu_milli for n in nodes), default=1),
        max_gpus=max((len(n.gpus) for n in nodes), default=1),
        model_demand=demand,
    )
