"""Pure functions on a node's *state key* — the canonical form of its free capacity.

Nodes whose keys are equal are interchangeable for placement, so every evaluation is
memoised by key (equivalence classes of nodes). A key is
``(model, cpu_cap, mem_cap, cpu_free, mem_free, domains, fabric)`` where ``domains``
holds, per NVLink domain, the free milli of each healthy GPU (sorted descending), domains
sorted, and ``fabric`` is the node's leaf flags (``scheduler.fabric``; 0 outside a fabric).

An *option* says which GPUs a request takes inside a node, in key coordinates:
``((domain_pos, value), ...)``: for a fractional shape, one pair = "a GPU of that domain
whose free milli is ``value``"; for whole GPUs, pairs = "``value`` idle GPUs of that domain".
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from functools import lru_cache

from scheduler.model import MILLI

Domains = tuple[tuple[int, ...], ...]
NodeKey = tuple[str, int, int, int, int, Domains, int]
Option = tuple[tuple[int, int], ...]


class NvlinkNeed(IntEnum):
    NONE = 0
    PREFERRED = 1
    REQUIRED = 2


@dataclass(frozen=True)
class Shape:
    """What a request needs on one node (the unit of per-node evaluation)."""

    models: frozenset[str]
    gpus: int
    milli: int
    cpu: int
    mem: int
    nvlink: NvlinkNeed = NvlinkNeed.NONE
    # Fractional shapes of a known tenant may share only GPUs no other tenant holds a
    # fraction of (unless the node is shared tenancy); "" = no tenant check.
    tenant: str = ""

    @property
    def fractional(self) -> bool:
        return self.milli < MILLI


def make_key(
    model: str, cpu_cap: int, mem_cap: int, cpu_free: int, mem_free: int,
    domains: list[list[int]], fabric: int = 0,
) -> tuple[NodeKey, list[int]]:
    """Canonical key plus, for each canonical domain position, the original domain index.

    Memoised on its inputs (``_make_key``): most nodes of a pool share a state (idle, the
    same model and size), and a pass keys every node (10,000 sorts per pass at 10,000
    nodes). The returned order list is shared: callers only read it."""
    return _make_key(model, cpu_cap, mem_cap, cpu_free, mem_free,
                     tuple(tuple(d) for d in domains), fabric)


@lru_cache(maxsize=1 << 16)
def _make_key(
    model: str, cpu_cap: int, mem_cap: int, cpu_free: int, mem_free: int,
    domains: tuple[tuple[int, ...], ...], fabric: int,
) -> tuple[NodeKey, list[int]]:
    decorated = sorted(
        (tuple(sorted(d, reverse=True)), pos) for pos, d in enumerate(domains) if d
    )
    key: NodeKey = (model, cpu_cap, mem_cap, cpu_free, mem_free,
                    tuple(d for d, _ in decorated), fabric)
    return key, [pos for _, pos in decorated]


# ``make_key`` for callers that already hold the domains as tuples (the working state
# re-keys a node on every change: no list-to-tuple copy, no extra call).
make_key_of_tuples = _make_key


def total_free(key: NodeKey) -> int:
    return sum(sum(d) for d in key[5])


def idle_gpus(key: NodeKey) -> int:
    return sum(1 for d in key[5] for v in d if v == MILLI)


def gpu_count(key: NodeKey) -> int:
    return sum(len(d) for d in key[5])


def fits_host(key: NodeKey, shape: Shape) -> bool:
    """Model, CPU and memory filters (GPU fit is decided by :func:`options`)."""
    if shape.gpus and shape.models and key[0] not in shape.models:
        return False
    return key[3] >= shape.cpu and key[4] >= shape.mem


def options(key: NodeKey, shape: Shape) -> list[Option]:
    """Feasible GPU choices on a node in this state, best-fit first; [] if none."""
    if not fits_host(key, shape):
        return []
    if shape.gpus == 0:
        return [()]
    if shape.fractional:
        return _fractional_options(key[5], shape.milli)
    whole = _whole_option(key[5], shape.gpus, shape.nvlink)
    return [whole] if whole is not None else []


def _fractional_options(domains: Domains, milli: int) -> list[Option]:
    seen: set[tuple[int, int]] = set()
    out: list[tuple[int, int]] = []
    for pos, dom in enumerate(domains):
        for v in dom:
            if v >= milli and (pos, v) not in seen:
                seen.add((pos, v))
                out.append((pos, v))
    out.sort(key=lambda pv: (pv[1], pv[0]))  # least free first: pack partly used GPUs
    return [(pv,) for pv in out]


def _whole_option(domains: Domains, count: int, nvlink: NvlinkNeed) -> Option | None:
    idle = [sum(1 for v in d if v == MILLI) for d in domains]
    single = [(n, pos) for pos, n in enumerate(idle) if n >= count]
    if single:
        _, pos = min(single)  # best fit: the fullest domain that still holds it
        return ((pos, count),)
    if nvlink == NvlinkNeed.REQUIRED or sum(idle) < count:
        return None
    picks: list[tuple[int, int]] = []
    left = count
    for n, pos in sorted(((n, pos) for pos, n in enumerate(idle) if n), reverse=True):
        take = min(n, left)
        picks.append((pos, take))
        left -= take
        if not left:
            break
    return tuple(sorted(picks))


def apply(key: NodeKey, shape: Shape, option: Option) -> NodeKey:
    """The key after placing ``shape`` with ``option`` (not re-canonicalised)."""
    doms = [list(d) for d in key[5]]
    for pos, value in option:
        dom = doms[pos]
        if shape.fractional:
            dom[dom.index(value)] = value - shape.milli
        else:
            for _ in range(value):
                dom[dom.index(MILLI)] = 0
    new_domains = tuple(sorted(tuple(sorted(d, reverse=True)) for d in doms))
    return (key[0], key[1], key[2], key[3] - shape.cpu, key[4] - shape.mem, new_domains,
            key[6])


def idle_domains(key: NodeKey) -> int:
    """NVLink domains whose GPUs are all idle."""
    return sum(1 for d in key[5] if d and all(v == MILLI for v in d))


def node_idle(key: NodeKey) -> bool:
    """True for a GPU node with every GPU idle."""
    return bool(key[5]) and idle_domains(key) == len(key[5])


def domains_spanned(option: Option) -> int:
    return len(option)
