"""Placing MIG instances on a pool's GPUs (ADR 0222; geometry in ``scheduler.mig``).

Pure: GPUs as the portal recorded them (mode, plain use, MIG layout) in, a start slot per
instance or a reason out. Rules:

- only a GPU whose operator mode allows MIG (``dynamic``, or ``fixed``) and whose model has
  a MIG table;
- a ``fixed`` GPU (ADR 0238) offers exactly the instances of its layout, each at the start
  slot the layout gives (the lowest free one first), and is never laid out otherwise;
- never a GPU held whole or by a time-sliced fraction (``plain``) during the window;
- an instance only at a valid start on free slices (``scheduler.mig.can_add``);
- all instances of one request on one node;
- the start (and the GPU) where the FGD-style fragmentation score grows least, GPUs that
  already carry instances before fresh ones, so large profiles and whole GPUs stay free.

Instances of different tenants may share a GPU (MIG isolates them); tenancy is not a rule
here. Whole-GPU, gang and fractional work is kept off GPUs with instances by the caller,
which hides them from the main core (``portal.leasing.allocation``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum

from scheduler.mig import Instance, can_add, frag_score, model_for, place, ranges

WHOLE = "whole"
DYNAMIC = "dynamic"
FIXED = "fixed"  # MIG on, the operator's layout (``fixed``), never reconfigured


class MigWait(Enum):
    NO_MIG_GPU = "mig_none"  # no GPU of the models may run MIG (mode, model)
    NO_SLICES = "mig_full"  # MIG GPUs exist, none has a valid free placement now


@dataclass(frozen=True)
class MigGpu:
    node: str
    index: int
    model: str
    mode: str = WHOLE  # WHOLE: never MIG; DYNAMIC: MIG while no plain use
    plain: bool = False  # held whole or by a fraction during the window
    healthy: bool = True
    layout: tuple[Instance, ...] = ()  # (profile, start) of the instances held
    # preemptible use (ADR 0241): the layout's instances held by spot leases, with their
    # lease ids, and the spot leases that alone make it ``plain``
    spot: tuple[tuple[str, Instance], ...] = ()
    plain_spot: tuple[str, ...] = ()
    fixed: tuple[Instance, ...] = ()  # mode FIXED: the instances it offers, all of them


@dataclass(frozen=True)
class MigRequest:
    id: str
    profile: str
    count: int
    models: frozenset[str]


@dataclass(frozen=True)
class MigPick:
    node: str
    index: int
    model: str
    profile: str
    start: int


def usable(gpu: MigGpu, models: frozenset[str]) -> bool:
    """May ``gpu`` carry MIG instances for an order of ``models``?"""
    return (gpu.mode in (DYNAMIC, FIXED) and gpu.healthy and not gpu.plain
            and gpu.model in models and model_for(gpu.model) is not None)


def _best_on(gpus: Sequence[MigGpu], profile: str,
             demand: Mapping[str, float] | None) -> tuple[int, int] | None:
    """(position in ``gpus``, start) of the best next instance, or None."""
    best: tuple[tuple[int, float, int, int], int, int] | None = None
    for pos, gpu in enumerate(gpus):
        model = model_for(gpu.model)
        assert model is not None
        if gpu.mode == FIXED:
            start = fixed_start(gpu, profile)
            delta = 0.0  # the layout is the operator's: nothing to score
        else:
            start = place(model, profile, gpu.layout, demand)
        if start is None:
            continue
        if gpu.mode != FIXED:
            used = ranges(model, gpu.layout)
            delta = frag_score(model, [*used, (start, model.profile(profile).memory_slices)],
                               demand) - frag_score(model, used, demand)
        key = (0 if gpu.layout else 1, delta, -start, pos)
        if best is None or key < best[0]:
            best = (key, pos, start)
    return None if best is None else (best[1], best[2])


def fixed_start(gpu: MigGpu, profile: str) -> int | None:
    """The lowest start of a free ``profile`` instance of a fixed GPU's layout, or None."""
    held = set(gpu.layout)
    free = [start for name, start in gpu.fixed if name == profile and (name, start) not in held]
    return min(free) if free else None


def place_on_node(gpus: Sequence[MigGpu], request: MigRequest,
                  demand: Mapping[str, float] | None = None) -> tuple[MigPick, ...] | None:
    """All ``request.count`` instances on these GPUs (one node's), or None."""
    pool = list(gpus)
    picks: list[MigPick] = []
    for _ in range(request.count):
        hit = _best_on(pool, request.profile, demand)
        if hit is None:
            return None
        pos, start = hit
        gpu = pool[pos]
        pool[pos] = replace(gpu, layout=(*gpu.layout, (request.profile, start)))
        picks.append(MigPick(gpu.node, gpu.index, gpu.model, request.profile, start))
    return tuple(picks)


def place_request(gpus: Sequence[MigGpu], request: MigRequest,
                  demand: Mapping[str, float] | None = None,
                  ) -> tuple[MigPick, ...] | MigWait:
    """Where ``request`` goes now: the node whose GPUs take it with the least added
    fragmentation (fullest first), or why it waits."""
    fit = [g for g in gpus if usable(g, request.models)
           and _has_profile(g.model, request.profile)]
    if not fit:
        return MigWait.NO_MIG_GPU
    by_node: dict[str, list[MigGpu]] = {}
    for gpu in sorted(fit, key=lambda g: (g.node, g.index)):
        by_node.setdefault(gpu.node, []).append(gpu)
    best: tuple[tuple[int, str], tuple[MigPick, ...]] | None = None
    for node, node_gpus in by_node.items():
        picks = place_on_node(node_gpus, request, demand)
        if picks is None:
            continue
        free = sum(1 for g in node_gpus if not g.layout)
        key = (free, node)
        if best is None or key < best[0]:
            best = (key, picks)
    return MigWait.NO_SLICES if best is None else best[1]


def _has_profile(model_name: str, profile: str) -> bool:
    model = model_for(model_name)
    return model is not None and any(p.name == profile for p in model.profiles)


def schedule(gpus: Sequence[MigGpu], requests: Sequence[MigRequest],
             demand: Mapping[str, float] | None = None,
             ) -> dict[str, tuple[MigPick, ...] | MigWait]:
    """Place ``requests`` in order (the caller's queue order); each placed one's instances
    are taken into account for the next."""
    pool = list(gpus)
    out: dict[str, tuple[MigPick, ...] | MigWait] = {}
    for request in requests:
        result = place_request(pool, request, demand)
        out[request.id] = result
        if isinstance(result, MigWait):
            continue
        for pick in result:
            pos = next(i for i, g in enumerate(pool)
                       if (g.node, g.index) == (pick.node, pick.index))
            pool[pos] = replace(pool[pos], layout=(*pool[pos].layout, (pick.profile,
                                                                       pick.start)))
    return out


def share_milli(model_name: str, profile: str) -> int:
    """GPU equivalents of one instance, in milli-GPU (ADR 0222): the larger of its compute
    share (of 7) and its memory share (of 8), rounded down."""
    model = model_for(model_name)
    if model is None:
        raise KeyError(model_name)
    p = model.profile(profile)
    return max(p.compute_slices * 1000 // 7, p.memory_slices * 1000 // 8)


def profiles_of(model_name: str) -> tuple[str, ...]:
    """The orderable MIG profiles of a model (media profiles left out); () when none."""
    model = model_for(model_name)
    return () if model is None else tuple(p.name for p in model.profiles if not p.media)


def memory_slices(model_name: str, profile: str) -> int:
    model = model_for(model_name)
    if model is None:
        raise KeyError(model_name)
    return model.profile(profile).memory_slices


def _overlaps(model_name: str, a: Instance, b: Instance) -> bool:
    model = model_for(model_name)
    assert model is not None
    (a0, an), (b0, bn) = ranges(model, [a, b])
    return a0 < b0 + bn and b0 < a0 + an


def _relaxed(gpu: MigGpu) -> MigGpu | None:
    """The GPU with its spot use gone, or None when nothing on it is preemptible."""
    if not gpu.spot and not (gpu.plain and gpu.plain_spot):
        return None
    spot = {inst for _, inst in gpu.spot}
    plain = gpu.plain and not gpu.plain_spot
    return replace(gpu, plain=plain, layout=tuple(i for i in gpu.layout if i not in spot),
                   spot=())


def _victims(gpus: Sequence[MigGpu], picks: tuple[MigPick, ...]) -> frozenset[str]:
    """The spot leases the picks displace: instances on their slices, plain spot use of
    their GPUs."""
    at = {(g.node, g.index): g for g in gpus}
    out: set[str] = set()
    for pick in picks:
        gpu = at[(pick.node, pick.index)]
        if gpu.plain and gpu.plain_spot:
            out.update(gpu.plain_spot)
        out.update(lease for lease, inst in gpu.spot
                   if _overlaps(gpu.model, inst, (pick.profile, pick.start)))
    for gpu in {at[(p.node, p.index)] for p in picks}:
        if not _fits_without(gpu, [p for p in picks if (p.node, p.index) ==
                                   (gpu.node, gpu.index)], out):
            out.update(lease for lease, _ in gpu.spot)  # compute slices or a profile limit
    return frozenset(out)


def _fits_without(gpu: MigGpu, picks: list[MigPick], victims: set[str]) -> bool:
    model = model_for(gpu.model)
    assert model is not None
    gone = [inst for lease, inst in gpu.spot if lease in victims]
    layout = [i for i in gpu.layout if i not in gone]
    for pick in picks:
        if not can_add(model, model.profile(pick.profile), pick.start, layout):
            return False
        layout.append((pick.profile, pick.start))
    return True


def place_preempting(gpus: Sequence[MigGpu], request: MigRequest,
                     demand: Mapping[str, float] | None = None,
                     ) -> tuple[tuple[MigPick, ...], frozenset[str]] | None:
    """Where a request that found no free placement goes if spot work gives way (ADR
    0241): the placement displacing the fewest spot leases — each GPU's spot use set aside
    alone first, then all of it —, with those leases; None when even that does not fit."""
    pool = list(gpus)
    best: tuple[tuple[int, int], tuple[MigPick, ...], frozenset[str]] | None = None
    for pos, gpu in enumerate(pool):
        relaxed = _relaxed(gpu)
        if relaxed is None:
            continue
        answer = place_request([*pool[:pos], relaxed, *pool[pos + 1:]], request, demand)
        if isinstance(answer, MigWait):
            continue
        victims = _victims(pool, answer)
        if best is None or (len(victims), pos) < best[0]:
            best = ((len(victims), pos), answer, victims)
    if best is not None:
        return best[1], best[2]
    every = [_relaxed(g) or g for g in pool]
    answer = place_request(every, request, demand)
    return None if isinstance(answer, MigWait) else (answer, _victims(pool, answer))
