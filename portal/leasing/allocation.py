"""The one adapter between the portal and the pure scheduling core (``scheduler``).

Reads a consistent snapshot through the ORM, translates leases into the core's frozen
dataclasses, calls it, and translates its decisions back. No writes happen here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings

import scheduler as core
from portal.core import clock
from portal.fleet.selectors import unreachable_node_ids
from portal.fleet.services.health import DEFAULT_UNREACHABLE_AFTER_S
from portal.inventory.models import Gpu, HcaPort, Node, SwitchLink
from portal.leasing import states
from portal.leasing.models import MILLI_PER_SLOT, Allocation, Lease, Quota

PRIORITY = {"reserved": core.PriorityClass.RESERVED, "on_demand": core.PriorityClass.ON_DEMAND,
            "spot": core.PriorityClass.SPOT}
NODE_STATE = {
    Node.State.READY: core.NodeState.READY, Node.State.DRAINING: core.NodeState.DRAINING,
    Node.State.DRAINED: core.NodeState.CORDONED, Node.State.DOWN: core.NodeState.DOWN,
    Node.State.MAINTENANCE: core.NodeState.MAINTENANCE,
}
LOCALITY = {"nvlink": core.LocalityLevel.NVLINK, "node": core.LocalityLevel.NODE,
            "leaf": core.LocalityLevel.LEAF, "spine": core.LocalityLevel.SPINE}
HOLDING_STATES = tuple(sorted(states.HOLDING))
LINGERING = tuple(sorted(states.ON_HARDWARE))  # past its end, still holds until torn down
FAR_FUTURE = 2**40


def epoch(at: datetime | None) -> int | None:
    return None if at is None else int(at.timestamp())


def from_epoch(value: int | None) -> datetime | None:
    if value is None or value >= FAR_FUTURE:
        return None
    return datetime.fromtimestamp(value, tz=UTC)


def _nodes() -> tuple[core.Node, ...]:
    gpus: dict[int, list[core.Gpu]] = defaultdict(list)
    for g in Gpu.objects.order_by("node_id", "index").values_list(
            "node_id", "index", "model", "memory_mib", "nvlink_domain", "health"):
        node_id, index, model, memory, domain, health = g
        gpus[node_id].append(core.Gpu(index=index, model=model, memory_mib=memory,
                                      nvlink_domain=domain if domain is not None else 100 + index,
                                      healthy=health == Gpu.Health.HEALTHY))
    silent = _unreachable()
    return tuple(
        core.Node(name=hostname, cpu_milli=cpu, memory_mib=mem, gpus=tuple(gpus[pk]),
                  state=core.NodeState.CORDONED if pk in silent and state == Node.State.READY
                  else NODE_STATE[state], shared_tenancy=shared)
        for pk, hostname, cpu, mem, state, shared in Node.objects.order_by(
            "hostname").values_list(
            "pk", "hostname", "cpu_milli", "memory_mib", "state", "shared_tenancy"))


def _unreachable() -> set[int]:
    """Nodes not offered (cordoned in the snapshot; their leases stay): the fleet's
    unreachable verdict, and, with real agents, every node whose agent has not reported
    for ``GPUPOOL_AGENT_UNREACHABLE_AFTER_S`` (the health sweep only runs every 15 s).
    Simulated agents (the demo) apply at once and always count as reachable."""
    silent = unreachable_node_ids()
    if settings.GPUPOOL_SIMULATED_AGENTS:
        return silent
    after = getattr(settings, "GPUPOOL_AGENT_UNREACHABLE_AFTER_S", DEFAULT_UNREACHABLE_AFTER_S)
    cutoff = clock.now() - timedelta(seconds=after)
    stale = Node.objects.exclude(last_heartbeat__gte=cutoff).values_list("pk", flat=True)
    return silent | set(stale)


def _topology() -> core.Topology:
    """The switch graph: every switch-to-switch cable (all uplinks, any depth) and, per
    node, the leaves its HCA ports are cabled to (one per rail); a node without recorded
    HCA ports falls back to its ``leaf``."""
    parent = {hostname: f"sw:{leaf_guid}" for hostname, leaf_guid in Node.objects.filter(
        leaf__isnull=False).values_list("hostname", "leaf__guid")}
    links = tuple(sorted((f"sw:{a}", f"sw:{b}") for a, b in SwitchLink.objects.values_list(
        "a__guid", "b__guid")))
    attach: dict[str, set[str]] = defaultdict(set)
    for hostname, switch_guid in HcaPort.objects.filter(
            node__isnull=False, switch__isnull=False).values_list(
            "node__hostname", "switch__guid"):
        attach[hostname].add(f"sw:{switch_guid}")
    return core.Topology(parent=parent, links=links,
                         attach={h: tuple(sorted(s)) for h, s in sorted(attach.items())})


def _leases(exclude: Iterable[str] = ()) -> tuple[core.Lease, ...]:
    skip = set(exclude)
    parts: dict[Any, dict[tuple[str, int], int]] = defaultdict(lambda: defaultdict(int))
    for lease_id, hostname, index in Allocation.objects.filter(live=True).values_list(
            "lease_id", "node__hostname", "gpu__index"):
        parts[lease_id][(hostname, index)] += MILLI_PER_SLOT
    out: list[core.Lease] = []
    # A lease past its end still holds its GPUs until its teardown finished (expiry runs
    # on a beat): never hand them to someone else before that.
    on_hardware = int(clock.now().timestamp()) + 1
    for lease in Lease.objects.filter(pk__in=list(parts)).only(
            "id", "tenant__slug", "priority", "start_at", "end_at", "borrowed", "gpu_model",
            "state").select_related("tenant"):
        if str(lease.id) in skip:
            continue
        by_node: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for (hostname, index), milli in sorted(parts[lease.pk].items()):
            by_node[hostname].append((index, milli))
        out.append(core.Lease(
            id=str(lease.id), tenant=lease.tenant.slug, priority=PRIORITY[lease.priority],
            parts=tuple(core.NodeAllocation(node=h, gpus=tuple(g)) for h, g in by_node.items()),
            start=int(lease.start_at.timestamp()),
            end=max(int(lease.end_at.timestamp()),
                    on_hardware if lease.state in LINGERING else 0),
            borrowed=lease.borrowed, model=lease.gpu_model))
    return tuple(out)


def _quotas() -> dict[str, core.TenantQuota]:
    rows: dict[str, list[Quota]] = defaultdict(list)
    for quota in Quota.objects.select_related("tenant"):
        rows[quota.tenant.slug].append(quota)
    out: dict[str, core.TenantQuota] = {}
    for slug, quotas in rows.items():
        guaranteed = {q.gpu_model: q.guaranteed_gpus for q in quotas if q.gpu_model}
        borrowing = all(q.allow_borrowing for q in quotas)
        headroom = sum(max(q.max_gpus - q.guaranteed_gpus, 0) for q in quotas)
        out[slug] = core.TenantQuota(tenant=slug, guaranteed=guaranteed,
                                     borrow_limit=headroom if borrowing else 0)
    return out


def _usage(now: datetime) -> tuple[core.UsageRecord, ...]:
    records = []
    for lease in Lease.objects.filter(active_at__isnull=False).select_related("tenant").only(
            "tenant__slug", "active_at", "ended_at", "gpu_count", "nodes", "gpu_milli"):
        end = min(lease.ended_at or now, now)
        seconds = max((end - lease.active_at).total_seconds(), 0) if lease.active_at else 0
        if seconds:
            records.append(core.UsageRecord(tenant=lease.tenant.slug,
                                            gpu_seconds=seconds * lease.total_gpus,
                                            at=int(end.timestamp())))
    return tuple(records)


def hardware() -> core.Snapshot:
    """Nodes and topology only (no leases): what ``never_fits`` compares an order with."""
    return core.Snapshot(nodes=_nodes(), topology=_topology())


def never_fits(lease: Lease, now: datetime) -> core.NeverFits | None:
    """Why no future state of the pool can hold ``lease`` (an unsaved order), or None."""
    return core.never_fits(to_request(lease, now), hardware())


def snapshot(*, exclude_leases: Iterable[str] = ()) -> core.Snapshot:
    """Everything the core needs, read in the caller's transaction."""
    now = clock.now()
    return core.Snapshot(nodes=_nodes(), topology=_topology(), leases=_leases(exclude_leases),
                         quotas=_quotas(), usage=_usage(now))


def to_request(lease: Lease, now: datetime) -> core.Request:
    locality = None
    if lease.locality in LOCALITY:
        locality = core.Locality(level=LOCALITY[lease.locality], required=lease.locality_required)
    start = max(lease.start_at, now)
    end = lease.end_at if lease.start_at >= now else now + (lease.end_at - lease.start_at)
    return core.Request(
        id=str(lease.id), tenant=lease.tenant.slug, priority=PRIORITY[lease.priority],
        gpus=lease.gpu_count, gpu_milli=lease.gpu_milli,
        models=frozenset(lease.allowed_models), nodes=lease.nodes, locality=locality,
        start=int(start.timestamp()), end=int(end.timestamp()),
        # milliseconds: only the order matters; an operator boost counts as seconds of age
        submitted_at=int(lease.created.timestamp() * 1000) - lease.queue_boost * 1000)


def schedule(queue: list[Lease], now: datetime, policy: str | None = None) -> core.PassResult:
    snap = snapshot()
    return core.schedule_pass(snap, [to_request(lease, now) for lease in queue],
                              int(now.timestamp()), policy)


def preview(lease: Lease, now: datetime) -> core.Quote:
    return core.quote(snapshot(), to_request(lease, now), int(now.timestamp()))


def extension(lease: Lease, new_end: datetime) -> core.ExtensionResult:
    return core.check_extension(snapshot(), str(lease.id), int(new_end.timestamp()))


Reason = core.Reason
Placement = core.Placement
Limit = core.Limit
NeverFits = core.NeverFits
Unplaceable = core.Unplaceable


def queue_positions(queue: list[Lease], now: datetime) -> dict[str, int]:
    """1-based place of each lease of ``queue`` in the order the next pass considers them
    (the core's ``queue_order``: priority class, fair share, age with operator boost)."""
    snap = core.Snapshot(nodes=(), quotas=_quotas(), usage=_usage(now))
    order = core.queue_order(snap, [to_request(lease, now) for lease in queue],
                             int(now.timestamp()))
    return {request.id: place for place, request in enumerate(order, 1)}
