"""Reading the openb trace CSVs and resampling pods as in the FGD paper."""

from __future__ import annotations

import csv
import random
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
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


# Model pairs an order may accept on the openb nodes (synthetic constraints, --gpuspec).
FAMILIES = (("G2", "G3"), ("V100M16", "V100M32"), ("P100", "T4"))
# The form of FGD's openb_pod_list_gpuspec{10,20,33}.csv (--gpuspec-form fgd): a pod names
# one model, or both V100 memory sizes; how those files were drawn is not published.
FGD_SPECS = (("A10",), ("G2",), ("G3",), ("P100",), ("T4",), ("V100M16", "V100M32"))
FORMS = {"pair": FAMILIES, "fgd": FGD_SPECS}


def ignore_models(pods: Sequence[Pod]) -> list[Pod]:
    """The pods with their model constraints dropped (any model)."""
    return [replace(p, models=frozenset()) if p.models else p for p in pods]


def constrain(pods: Sequence[Pod], nodes: Sequence[Node], share: float,
              form: str = "pair") -> list[Pod]:
    """Synthetic model constraints: a ``share`` of the GPU pods without one (drawn per
    pod name, so resampled clones keep theirs) accept one entry of ``FORMS[form]``
    (``pair``: :data:`FAMILIES`; ``fgd``: :data:`FGD_SPECS`), drawn by the entry's GPU
    capacity among the entries with a node of ``num_gpu`` GPUs."""
    cap: dict[str, int] = {}
    most: dict[str, int] = {}
    for n in nodes:
        cap[n.model] = cap.get(n.model, 0) + len(n.gpus)
        most[n.model] = max(most.get(n.model, 0), len(n.gpus))
    out = []
    for p in pods:
        rng = random.Random(zlib.crc32(p.name.encode()))
        if p.models or not p.num_gpu or rng.random() >= share:
            out.append(p)
            continue
        fams = [f for f in FORMS[form] if max(most.get(m, 0) for m in f) >= p.num_gpu]
        if not fams:
            out.append(p)
            continue
        fam = rng.choices(fams, [sum(cap.get(m, 0) for m in f) for f in fams])[0]
        out.append(replace(p, models=frozenset(fam)))
    return out


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
