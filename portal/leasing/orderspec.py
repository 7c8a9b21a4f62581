"""What a tenant orders: the order's shape (:class:`OrderSpec`) and its time window.

Plain values, read by the order checks (``services``, ``feasibility``, ``quoting``); they
live here so that those modules share them without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from portal.leasing.models import Locality, Priority


@dataclass
class OrderSpec:
    models: list[str] = field(default_factory=list)
    gpu_count: int = 1
    gpu_milli: int = 1000
    mig_profile: str = ""  # a MIG profile: gpu_count counts instances (ADR 0222)
    nodes: int = 1
    locality: str = Locality.ANY
    locality_required: bool = False
    priority: str = Priority.ON_DEMAND
    start_at: datetime | None = None
    duration_hours: Decimal | None = None
    end_at: datetime | None = None
    name: str = ""
    tags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime

    @property
    def hours(self) -> Decimal:
        return Decimal((self.end - self.start).total_seconds()) / 3600
