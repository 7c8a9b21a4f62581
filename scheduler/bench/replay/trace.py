"""Reading the openb trace CSVs and resampling pods as in the FGD paper."""

from __future__ import annotations

import csv
import random
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from scheduler.frag import FragModel, model_pressure, typical_task_mix
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

_V100 = "V100M16|V100M32"
# --gpuspec-form observed: how often each gpu_spec occurs in FGD's
# openb_pod_list_gpuspec33_cpu0.csv (hkust-adsl/kubernetes-scheduler-simulator), by pod
# shape. Counted by hand from five spread windows of that file (its GPU pods 0-219,
# 1775-1994, 3540-3759, 5301-5515, 6842-7063: 1,097 pods, 358 with a spec = 32.6 %;
# fractional 156/524, one whole GPU 195/554, multi-GPU 7/19 named a model), so a
# *distribution* derived from the file, not the file (its terms: research use only).
# The file's k-th pod is the default trace's k-th GPU pod. Counts, per shape:
OBSERVED_SPECS: dict[str, tuple[tuple[str, int], ...]] = {
    # num_gpu == 1, gpu_milli < 1000: T4 or P100 almost always.
    "fractional": (("T4", 108), ("P100", 42), (f"G2|P100|T4|{_V100}", 6)),
    # num_gpu == 1, a whole GPU: every form the file has.
    "whole": (("T4", 80), ("G2", 43), (_V100, 30), (f"P100|{_V100}", 10), ("G3", 10),
              (f"G2|P100|T4|{_V100}", 6), (f"P100|T4|{_V100}", 5),
              (f"A10|G2|T4|{_V100}", 3), ("V100M32", 3), ("A10|T4", 2), ("P100", 1),
              (f"A10|G2|P100|T4|{_V100}", 1), ("P100|V100M16", 1)),
    # num_gpu > 1 (few in the windows: 7 of 19).
    "multi": (("G2", 3), ("G3", 2), (_V100, 1), (f"T4|{_V100}", 1)),
}


def shape_class(pod: Pod) -> str:
    """``fractional``, ``whole`` (one whole GPU) or ``multi`` (the keys of
    :data:`OBSERVED_SPECS`)."""
    if pod.num_gpu > 1:
        return "multi"
    return "fractional" if 0 < pod.gpu_milli < MILLI else "whole"


def ignore_models(pods: Sequence[Pod]) -> list[Pod]:
    """The pods with their model constraints dropped (any model)."""
    return [replace(p, models=frozenset()) if p.models else p for p in pods]


def _candidates(form: str, pod: Pod, cap: dict[str, int], most: dict[str, int],
                ) -> list[tuple[frozenset[str], float]]:
    """The specs ``pod`` may draw under ``form``, with their weights; a spec needs a
    node of at least ``num_gpu`` GPUs of one of its models."""
    if form == "observed":
        table = [(frozenset(spec.split("|")), float(n))
                 for spec, n in OBSERVED_SPECS[shape_class(pod)]]
    else:
        table = [(frozenset(f), float(sum(cap.get(m, 0) for m in f))) for f in FORMS[form]]
    return [(ms, w) for ms, w in table if max(most.get(m, 0) for m in ms) >= pod.num_gpu]


def constrain(pods: Sequence[Pod], nodes: Sequence[Node], share: float,
              form: str = "pair") -> list[Pod]:
    """Synthetic model constraints: a ``share`` of the GPU pods without one (drawn per
    pod name, so resampled clones keep theirs) accept one spec of ``form``: ``pair``
    (:data:`FAMILIES`) or ``fgd`` (:data:`FGD_SPECS`), drawn by the spec's GPU capacity;
    ``observed``: drawn with the frequencies of :data:`OBSERVED_SPECS` for the pod's
    shape. Only specs with a node of ``num_gpu`` GPUs are drawn."""
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
        specs = _candidates(form, p, cap, most)
        if not specs:
            out.append(p)
            continue
        models = rng.choices([s for s, _ in specs], [w for _, w in specs])[0]
        out.append(replace(p, models=models))
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
    capacity: dict[str, int] = {}
    for n in nodes:
        capacity[n.model] = capacity.get(n.model, 0) + len(n.gpus)
    return ScoreContext(
        frag=FragModel(mix),
        max_cpu=max((n.cpu_milli for n in nodes), default=1),
        max_gpus=max((len(n.gpus) for n in nodes), default=1),
        model_pressure=model_pressure(mix, capacity),
    )
