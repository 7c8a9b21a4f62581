"""Output model: a placement with a score breakdown, or a reason with an earliest start."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from scheduler.model import NodeAllocation


class Reason(StrEnum):
    """Why a request is not placed now (values are stable strings for the portal)."""

    NO_MATCHING_GPUS = "no_matching_gpus"  # the cluster never has such a shape
    INSUFFICIENT_CAPACITY = "insufficient_capacity"  # busy: not enough free GPUs
    FRAGMENTATION = "fragmentation"  # enough free milli in total, but scattered
    QUOTA = "quota"  # guarantee + borrowing limit exceeded
    BUDGET = "budget"  # GPU-hour budget for the period exhausted
    PRIORITY = "priority"  # capacity went to requests ahead in the queue
    TOPOLOGY = "topology"  # fits, but not with the required locality
    RESERVED = "reserved"  # capacity is held by an advance reservation
    NOT_YET = "not_yet"  # advance reservation accepted for later (see earliest_start)


@dataclass(frozen=True)
class Placement:
    request_id: str
    parts: tuple[NodeAllocation, ...]
    start: int
    end: int | None
    model: str
    borrowed: bool = False
    victims: tuple[str, ...] = ()  # lease ids to preempt before starting
    score: Mapping[str, float] = field(default_factory=dict)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(p.node for p in self.parts)

    @property
    def gpu_ids(self) -> tuple[tuple[str, int], ...]:
        return tuple((p.node, g) for p in self.parts for g, _ in p.gpus)


@dataclass(frozen=True)
class Unplaceable:
    request_id: str
    reason: Reason
    detail: str = ""
    earliest_start: int | None = None  # None: unknown or never within the horizon
    victims: tuple[str, ...] = ()  # leases whose preemption would make room


Decision = Placement | Unplaceable


@dataclass(frozen=True)
class PassResult:
    decisions: tuple[Decision, ...]

    def placed(self) -> tuple[Placement, ...]:
        return tuple(d for d in self.decisions if isinstance(d, Placement))

    def by_id(self) -> dict[str, Decision]:
        return {d.request_id: d for d in self.decisions}


@dataclass(frozen=True)
class Quote:
    """A preview: would the request be placed now, and if not, when."""

    placeable_now: bool
    reason: Reason | None
    earliest_start: int | None
    placement: Placement | None


@dataclass(frozen=True)
class ExtensionResult:
    ok: bool
    longest_end: int | None  # the latest end the calendar allows (None: unbounded)
    conflicts: tuple[str, ...] = ()  # lease ids in the way
