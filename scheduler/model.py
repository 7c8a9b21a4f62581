"""Input model of the scheduling core: frozen dataclasses, validated on construction.

Time is an ``int`` of seconds (UTC epoch seconds in the portal; any monotonic origin in
replays). ``end=None`` means "no end" (open-ended lease or request).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from functools import cached_property

from scheduler.switchgraph import ROOT, SwitchGraph

MILLI = 1000  # capacity of one GPU in milli-GPU


class NodeState(StrEnum):
    """Only ``READY`` nodes receive new work; the others keep their leases."""

    READY = "ready"
    DRAINING = "draining"
    CORDONED = "cordoned"
    DOWN = "down"
    MAINTENANCE = "maintenance"


class PriorityClass(IntEnum):
    """Lower value is scheduled first. ``SPOT`` leases are preemptible."""

    RESERVED = 0
    ON_DEMAND = 1
    SPOT = 2


class LocalityLevel(StrEnum):
    """Scope a request's GPUs must (or should) share."""

    NVLINK = "nvlink"  # one NVLink domain inside one node
    NODE = "node"  # one node
    LEAF = "leaf"  # nodes under one leaf switch
    SPINE = "spine"  # nodes at most ``max_hops`` switch levels apart


@dataclass(frozen=True)
class Locality:
    level: LocalityLevel
    required: bool = False
    max_hops: int | None = None  # only for SPINE: levels above the leaf allowed


@dataclass(frozen=True)
class Gpu:
    index: int
    model: str
    memory_mib: int = 0
    nvlink_domain: int = 0
    healthy: bool = True


@dataclass(frozen=True)
class Node:
    """A host. All healthy GPUs of a node share one model (validated).

    ``shared_tenancy``: fractions of one GPU may go to different tenants (the operator
    marked the node's pool so); by default a GPU is shared only within one tenant.
    """

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: tuple[Gpu, ...] = ()
    state: NodeState = NodeState.READY
    shared_tenancy: bool = False

    def __post_init__(self) -> None:
        models = {g.model for g in self.gpus}
        if len(models) > 1:
            raise ValueError(f"node {self.name}: mixed GPU models {sorted(models)}")
        if len({g.index for g in self.gpus}) != len(self.gpus):
            raise ValueError(f"node {self.name}: duplicate GPU index")

    @cached_property
    def model(self) -> str:  # kept in the instance: a pass reads it ≈ 10 times a node
        return self.gpus[0].model if self.gpus else ""


@dataclass(frozen=True)
class Topology:
    """Where nodes sit in the fabric.

    *Tree form* (``parent`` only): ``parent`` maps a node or switch to its parent switch
    (node → leaf → spine → …). *Graph form* (``links`` or ``attach`` given): ``links`` are
    switch-to-switch cables, every uplink kept (multi-spine, 3-tier); ``attach`` maps a
    node to the leaves its HCAs are cabled to (several for rail-optimised nodes); nodes
    without ``attach`` use ``parent`` for their leaf. Distances are switch hops on the
    graph (``scheduler.switchgraph``). Nodes missing from both are each under a private
    leaf.
    """

    parent: Mapping[str, str] = field(default_factory=dict)
    links: tuple[tuple[str, str], ...] = ()
    attach: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    _graph: list[SwitchGraph] = field(default_factory=list, init=False, compare=False,
                                      repr=False)

    @property
    def is_graph(self) -> bool:
        return bool(self.links or self.attach)

    def graph(self) -> SwitchGraph:
        """The switch graph (built once per topology)."""
        if not self._graph:
            self._graph.append(SwitchGraph(self.parent, self.links, self.attach))
        return self._graph[0]

    def leaf_of(self, name: str) -> str | None:
        """The leaf (or rail group) a node is local under (None: not in the topology)."""
        return self.graph().local(name) if self.is_graph else self.parent.get(name)

    def groups(self, name: str, level: int) -> tuple[str, ...]:
        """The switch groups of a node at ``level``: nodes sharing one are at most
        ``level`` levels apart (tree form: the one ancestor at that level)."""
        if self.is_graph:
            return self.graph().groups(name, level)
        return (self.local_group(name, level),)

    def levels(self, name: str) -> int:
        """How many levels above its leaf a node's groups can still differ."""
        return self.graph().depth if self.is_graph else len(self.ancestors(name))

    def hops(self, a: str, b: str) -> int | None:
        """Levels between two nodes: 0 same leaf (or rail group), 1 through one spine…"""
        if self.is_graph:
            return self.graph().hops(a, b)
        for level in range(max(self.levels(a), self.levels(b)) + 1):
            if self.local_group(a, level) == self.local_group(b, level):
                return level
        return None

    def local_group(self, name: str, level: int) -> str:
        """Tree form: the switch ``level`` hops above a node's leaf (0: its leaf); nodes
        outside the topology are each their own leaf, and beyond the top all share one
        root."""
        ancestors = self.ancestors(name)
        if level < len(ancestors):
            return ancestors[level]
        if not ancestors:
            return "node:" + name if level == 0 else ROOT
        return ROOT

    def ancestors(self, name: str) -> tuple[str, ...]:
        """Tree form: switches from the leaf upwards."""
        out: list[str] = []
        cur = self.parent.get(name)
        while cur is not None and len(out) < 64:
            out.append(cur)
            cur = self.parent.get(cur)
        return tuple(out)


@dataclass(frozen=True)
class Request:
    """One order. ``gpus`` is per node; a gang has ``nodes > 1`` (all or nothing).

    ``gpu_milli < 1000`` asks for a share of one GPU (then ``gpus == 1, nodes == 1``).
    ``cpu_milli``/``memory_mib`` are per node. ``models`` empty means any model.
    """

    id: str
    tenant: str
    priority: PriorityClass = PriorityClass.ON_DEMAND
    gpus: int = 1
    gpu_milli: int = MILLI
    models: frozenset[str] = frozenset()
    cpu_milli: int = 0
    memory_mib: int = 0
    nodes: int = 1
    locality: Locality | None = None
    start: int = 0
    end: int | None = None
    submitted_at: int = 0

    def __post_init__(self) -> None:
        if self.gpus < 0 or self.nodes < 1 or self.cpu_milli < 0 or self.memory_mib < 0:
            raise ValueError(f"request {self.id}: negative size")
        if not 0 < self.gpu_milli <= MILLI:
            raise ValueError(f"request {self.id}: gpu_milli must be in 1..1000")
        if self.gpu_milli < MILLI and (self.gpus != 1 or self.nodes != 1):
            raise ValueError(f"request {self.id}: fractional requests take one GPU on one node")
        if self.end is not None and self.end <= self.start:
            raise ValueError(f"request {self.id}: empty time window")

    @property
    def total_milli(self) -> int:
        return self.gpus * self.gpu_milli * self.nodes

    @property
    def gpu_count(self) -> float:
        return self.total_milli / MILLI

    @property
    def duration(self) -> int | None:
        return None if self.end is None else self.end - self.start


@dataclass(frozen=True)
class NodeAllocation:
    """What one lease holds on one node: ``gpus`` is ``((gpu_index, milli), ...)``."""

    node: str
    gpus: tuple[tuple[int, int], ...]
    cpu_milli: int = 0
    memory_mib: int = 0

    @property
    def milli(self) -> int:
        return sum(m for _, m in self.gpus)


@dataclass(frozen=True)
class Lease:
    """A placed request (running, or an advance reservation when ``start`` is later)."""

    id: str
    tenant: str
    priority: PriorityClass
    parts: tuple[NodeAllocation, ...]
    start: int
    end: int | None = None
    borrowed: bool = False  # above the tenant's guarantee: reclaimable
    model: str = ""

    @property
    def milli(self) -> int:
        return sum(p.milli for p in self.parts)

    @property
    def preemptible(self) -> bool:
        return self.priority == PriorityClass.SPOT or self.borrowed

    def overlaps(self, start: int, end: int | None) -> bool:
        """True if the lease holds capacity somewhere in ``[start, end)``."""
        ends_after = self.end is None or self.end > start
        starts_before = end is None or self.start < end
        return ends_after and starts_before


@dataclass(frozen=True)
class TenantQuota:
    """Guaranteed whole GPUs per model, a borrowing limit, a GPU-hour budget.

    ``borrow_limit`` caps GPUs held above the guarantee (across models); ``None`` means
    no cap (idle capacity may be borrowed freely). ``gpu_hour_budget=None``: no budget.
    """

    tenant: str
    guaranteed: Mapping[str, int] = field(default_factory=dict)
    borrow_limit: int | None = None
    gpu_hour_budget: float | None = None
    gpu_hours_used: float = 0.0
    weight: float = 1.0


@dataclass(frozen=True)
class UsageRecord:
    """GPU-seconds a tenant consumed, ending at ``at`` (for fair-share decay)."""

    tenant: str
    gpu_seconds: float
    at: int


DEFAULT_HALF_LIFE_S = 7 * 24 * 3600


@dataclass(frozen=True)
class FairShareConfig:
    """Usage decays by half every ``half_life_s``; zero/negative is rejected."""

    half_life_s: int = DEFAULT_HALF_LIFE_S

    def __post_init__(self) -> None:
        if self.half_life_s <= 0:
            raise ValueError("half_life_s must be > 0 (decay cannot be disabled)")


@dataclass(frozen=True)
class TaskType:
    """One entry of the typical task mix used by fragmentation-aware scoring."""

    cpu_milli: int
    gpu_milli: int  # per GPU; 0 for CPU-only
    gpus: int
    models: frozenset[str]
    weight: float


@dataclass(frozen=True)
class Snapshot:
    """Everything the core needs for one decision, read consistently by the adapter."""

    nodes: tuple[Node, ...]
    topology: Topology = field(default_factory=Topology)
    leases: tuple[Lease, ...] = ()
    quotas: Mapping[str, TenantQuota] = field(default_factory=dict)
    usage: tuple[UsageRecord, ...] = ()
    fair_share: FairShareConfig = field(default_factory=FairShareConfig)
    task_mix: tuple[TaskType, ...] | None = None

    def __post_init__(self) -> None:
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError("duplicate node names")
        ids = [lease.id for lease in self.leases]
        if len(set(ids)) != len(ids):
            raise ValueError("duplicate lease ids")
