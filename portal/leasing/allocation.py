"""The one adapter between the portal and the pure scheduling core (``scheduler``).

Reads a snapshot through the ORM — nodes, topology and quotas from the worker's
validated cache (``schedcache``), the held leases from its lease book (brought up to date
from the change log on every use), fair-share usage fresh each time (``usage``: decayed
running totals) — translates leases into the core's frozen dataclasses, calls
it, and translates its decisions back. No writes happen here. Quotes share one snapshot
for a moment (``quotesnap``); placing never uses it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, Q

import scheduler as core
from portal.core import clock
from portal.fleet import intervals, protocol
from portal.fleet.lifecycle import OFFERED
from portal.fleet.selectors import unreachable_node_ids
from portal.inventory.models import Gpu, HcaPort, MigMode, Node, SwitchLink
from portal.leasing import schedcache, states, usage
from portal.leasing.models import MILLI_PER_SLOT, Allocation, Lease, MigInstance, Priority, Quota
from portal.leasing.quotesnap import QuoteSnapshot
from portal.tenants.models import Tenant
from scheduler import migfixed, migplace

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


@dataclass(frozen=True)
class Static:
    """The slowly changing part of a snapshot, as recorded (no reachability overlay):
    kept by the worker's scheduler cache (``CACHE``, ``schedcache``)."""

    nodes: tuple[core.Node, ...]
    position: Mapping[int, int]  # node pk -> index in ``nodes``
    gpu_at: Mapping[int, tuple[str, int]]  # GPU pk -> (hostname, index)
    tenant_slug: Mapping[int, str]
    topology: core.Topology
    quotas: Mapping[str, core.TenantQuota]


def _static() -> Static:
    """Read the whole static part from the database (the caller's transaction)."""
    nodes, position, gpu_at = _recorded_nodes()
    return Static(nodes=nodes, position=position, gpu_at=gpu_at,
                  tenant_slug=dict(Tenant.objects.values_list("pk", "slug")),
                  topology=_read_topology(), quotas=_read_quotas())


CACHE: schedcache.SchedulerCache[Static] = schedcache.SchedulerCache(_static)
QUOTES: QuoteSnapshot[core.Snapshot] = QuoteSnapshot()
# The core's working state of the running leases, kept between this process's passes
# and quotes (``scheduler.warm``): brought up to date with the leases that changed.
WARM = core.WarmBase()


def _recorded_nodes() -> tuple[tuple[core.Node, ...], dict[int, int],
                               dict[int, tuple[str, int]]]:
    rows = list(Node.objects.order_by("hostname").values_list(
        "pk", "hostname", "cpu_milli", "memory_mib", "state", "shared_tenancy", "service"))
    hostname = {pk: name for pk, name, *_ in rows}
    gpus: dict[int, list[core.Gpu]] = defaultdict(list)
    gpu_at: dict[int, tuple[str, int]] = {}
    for pk, node_id, index, model, memory, domain, health, service in Gpu.objects.order_by(
            "node_id", "index").values_list("pk", "node_id", "index", "model", "memory_mib",
                                            "nvlink_domain", "health", "service"):
        gpus[node_id].append(core.Gpu(index=index, model=model, memory_mib=memory,
                                      nvlink_domain=domain if domain is not None else 100 + index,
                                      healthy=health == Gpu.Health.HEALTHY
                                      and service in OFFERED))
        if node_id in hostname:
            gpu_at[pk] = (hostname[node_id], index)
    nodes = tuple(core.Node(name=name, cpu_milli=cpu, memory_mib=mem, gpus=tuple(gpus[pk]),
                            state=_offered_state(state, service), shared_tenancy=shared)
                  for pk, name, cpu, mem, state, shared, service in rows)
    return nodes, {row[0]: i for i, row in enumerate(rows)}, gpu_at


def _offered_state(state: str, service: str) -> core.NodeState:
    """A node out of the service lifecycle's ``in_service`` is not offered (cordoned):
    its running leases keep what is still granted (``portal.fleet.lifecycle``)."""
    mapped = NODE_STATE[state]
    if service not in OFFERED and mapped == core.NodeState.READY:
        return core.NodeState.CORDONED
    return mapped


def _read_topology() -> core.Topology:
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


def _read_quotas() -> dict[str, core.TenantQuota]:
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


def _nodes(static: Static | None = None) -> tuple[core.Node, ...]:
    """The cached nodes with the reachability verdict of now: a READY node that is not
    reachable is offered as cordoned."""
    static = static or CACHE.get()
    nodes = list(static.nodes)
    for pk in _unreachable():
        i = static.position.get(pk)
        if i is not None and nodes[i].state == core.NodeState.READY:
            nodes[i] = replace(nodes[i], state=core.NodeState.CORDONED)
    return tuple(nodes)


def _unreachable() -> set[int]:
    """Nodes not offered (cordoned in the snapshot; their leases stay): the fleet's
    unreachable verdict, and, with real agents, every node whose agent has not reported
    for ``intervals.current().unreachable_after_s`` (the health sweep only runs every 15 s).
    Simulated agents (the demo) apply at once and always count as reachable."""
    silent = unreachable_node_ids()
    if settings.GPUPOOL_SIMULATED_AGENTS:
        return silent
    after = intervals.current().unreachable_after_s
    cutoff = clock.now() - timedelta(seconds=after)
    stale = Node.objects.exclude(last_heartbeat__gte=cutoff).values_list("pk", flat=True)
    return silent | set(stale)


def _topology() -> core.Topology:
    """The switch graph (``schedcache``: cached, validated)."""
    return CACHE.get().topology


@dataclass(frozen=True)
class _Held:
    """A held lease as the lease book keeps it: the core's lease with its recorded end,
    and what the end of a pass needs (the sort key; whether it may outlive its end)."""

    lease: core.Lease
    created: float
    lingering: bool  # past its end it still holds its GPUs until torn down
    mig: bool = False  # MIG instances: never shown to the core, their GPUs hidden (ADR 0222)


def _held_order(held: _Held) -> tuple[float, str]:
    return (-held.created, held.lease.id)


def _read_held(ids: list[str] | None, basis: tuple[Mapping[int, tuple[str, int]],
                                                    Mapping[int, str]],
               ) -> dict[str, _Held]:
    """The leases ``ids`` (``None``: all) that hold live allocations: one row per (lease,
    GPU), the slots counted by the database, and one per lease; hostnames, GPU indexes
    and tenant slugs from the cache (``basis``)."""
    gpu_places, slugs = basis
    live = Allocation.objects.filter(live=True)
    if ids is not None:
        live = live.filter(lease_id__in=ids)
    parts: dict[Any, dict[tuple[str, int], int]] = defaultdict(dict)
    gpu_at = _gpu_places(gpu_places)
    for lease_id, gpu_id, slots in live.values_list("lease_id", "gpu_id").annotate(
            slots=Count("id")).order_by():
        parts[lease_id][gpu_at(gpu_id)] = slots * MILLI_PER_SLOT
    slug = _tenant_slugs(slugs)
    out: dict[str, _Held] = {}
    for pk, tenant_id, priority, start_at, end_at, borrowed, model, state, created, mig in (
            Lease.objects.filter(pk__in=live.values("lease_id")).values_list(
                "id", "tenant_id", "priority", "start_at", "end_at", "borrowed",
                "gpu_model", "state", "created", "mig_profile")):
        by_node: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for (hostname, index), milli in sorted(parts[pk].items()):
            by_node[hostname].append((index, milli))
        lease = core.Lease(
            id=str(pk), tenant=slug(tenant_id), priority=PRIORITY[priority],
            parts=tuple(core.NodeAllocation(node=h, gpus=tuple(g)) for h, g in by_node.items()),
            start=int(start_at.timestamp()), end=int(end_at.timestamp()),
            borrowed=borrowed, model=model)
        out[lease.id] = _Held(lease, created.timestamp(), state in LINGERING, bool(mig))
    return out


BOOK: schedcache.LeaseBook[_Held] = schedcache.LeaseBook(_read_held, _held_order)


def _leases(exclude: Iterable[str] = (), static: Static | None = None,
            mig_gpus: set[tuple[str, int]] | None = None) -> tuple[core.Lease, ...]:
    """Every lease holding live allocations, newest first, as the caller's transaction
    sees them: from the worker's lease book (``schedcache.LeaseBook``), which re-reads
    only the leases changed since its last read. MIG leases are left out; the GPUs they
    hold are added to ``mig_gpus`` (hostname, index)."""
    static = static or CACHE.get()
    skip = set(exclude)
    # A lease past its end still holds its GPUs until its teardown finished (expiry runs
    # on a beat): never hand them to someone else before that.
    on_hardware = int(clock.now().timestamp()) + 1
    out: list[core.Lease] = []
    for held in BOOK.held((static.gpu_at, static.tenant_slug)):
        lease = held.lease
        if held.mig:
            if mig_gpus is not None:
                mig_gpus.update((p.node, i) for p in lease.parts for i, _ in p.gpus)
            continue
        if lease.id in skip:
            continue
        if held.lingering and lease.end < on_hardware:
            lease = replace(lease, end=on_hardware)
        out.append(lease)
    return tuple(out)


def _gpu_places(known: Mapping[int, tuple[str, int]]) -> Callable[[int], tuple[str, int]]:
    """GPU pk -> (hostname, index), from the cache; one the cache lacks (added since it
    was validated) is read."""
    def place(gpu_id: int) -> tuple[str, int]:
        hit = known.get(gpu_id)
        if hit is None:
            hostname, index = Gpu.objects.values_list("node__hostname", "index").get(pk=gpu_id)
            hit = (hostname, index)
        return hit
    return place


def _tenant_slugs(known: Mapping[int, str]) -> Callable[[int], str]:
    def slug(tenant_id: int) -> str:
        hit = known.get(tenant_id)
        if hit is None:
            hit = Tenant.objects.values_list("slug", flat=True).get(pk=tenant_id)
        return hit
    return slug


def _quotas() -> Mapping[str, core.TenantQuota]:
    """The tenants' quotas (cached, validated)."""
    return CACHE.get().quotas


def _usage(now: datetime) -> tuple[core.UsageRecord, ...]:
    """Fair-share usage: the decayed running totals (``usage``), one query."""
    return tuple(core.UsageRecord(tenant=t, gpu_seconds=s, at=at)
                 for t, s, at in usage.records(now))


def hardware() -> core.Snapshot:
    """Nodes and topology only (no leases): what ``never_fits`` compares an order with."""
    static = CACHE.get()
    return core.Snapshot(nodes=_without_mig_gpus(_nodes(static), fixed_mig_gpus()),
                         topology=static.topology)


def never_fits(lease: Lease, now: datetime) -> core.NeverFits | None:
    """Why no future state of the pool can hold ``lease`` (an unsaved order), or None."""
    return core.never_fits(to_request(lease, now), hardware())


def snapshot(*, exclude_leases: Iterable[str] = ()) -> core.Snapshot:
    """Everything the core needs: the cached static part, validated, and the leases and
    usage of now, read in the caller's transaction."""
    now = clock.now()
    static = CACHE.get()
    mig_gpus: set[tuple[str, int]] = fixed_mig_gpus() | reported_split_gpus()
    leases = _leases(exclude_leases, static, mig_gpus)
    return core.Snapshot(nodes=_without_mig_gpus(_nodes(static), mig_gpus),
                         topology=static.topology, leases=leases, quotas=_quotas(),
                         usage=_usage(now))


def _without_mig_gpus(nodes: tuple[core.Node, ...],
                      hidden: set[tuple[str, int]]) -> tuple[core.Node, ...]:
    """GPUs carrying live MIG instances, in a fixed layout with MIG on, or still split
    on the hardware (``hidden``) are not offered to the core, as an unhealthy GPU is not:
    no whole-GPU lease, gang or fraction goes there (the MIG leases are not shown to it)."""
    if not hidden:
        return nodes
    names = {h for h, _ in hidden}
    return tuple(replace(n, gpus=tuple(replace(g, healthy=False) if (n.name, g.index) in hidden
                                       else g for g in n.gpus))
                 if n.name in names else n for n in nodes)


def forget_cache() -> None:
    """Drop what is cached (the next pass reads everything again)."""
    CACHE.forget()
    BOOK.forget()
    QUOTES.forget()
    WARM.forget()


def to_request(lease: Lease, now: datetime) -> core.Request:
    """The core's request for ``lease``; a MIG lease (never placed by the core) only for
    its place in the queue, as one GPU (ADR 0222)."""
    if lease.mig_profile:
        lease = Lease(id=lease.id, tenant=lease.tenant, priority=lease.priority,
                      allowed_models=lease.allowed_models, start_at=lease.start_at,
                      end_at=lease.end_at, created=lease.created,
                      queue_boost=lease.queue_boost)
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
    """Decide ``queue`` on a fresh snapshot (the cache validated, never the quotes')."""
    QUOTES.forget()  # this pass is about to change what the quotes were shown
    snap = snapshot()
    return core.schedule_pass(snap, [to_request(lease, now) for lease in queue],
                              int(now.timestamp()), policy, warm=WARM)


def preview(lease: Lease, now: datetime) -> core.Quote:
    """A quote on the shared quote snapshot (at most ``quotesnap`` TTL old)."""
    snap = QUOTES.get(snapshot, CACHE.token())
    return core.quote(snap, to_request(lease, now), int(now.timestamp()), warm=WARM)


def extension(lease: Lease, new_end: datetime) -> core.ExtensionResult:
    if lease.mig_profile:  # its slices are reserved by nobody else: MIG starts now only
        return core.ExtensionResult(ok=True, longest_end=None)
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


def replacement(lease: Lease, *, count: int, same_node: str | None,
                leaves: frozenset[str] | None, exclude: frozenset[str],
                now: datetime) -> core.Placement | None:
    """Where ``count`` GPUs of a running lease that failed can go now, keeping its
    placement promise: ``same_node`` (a GPU fault: a healthy GPU beside the others), or
    one node outside ``exclude`` (the lease's nodes) under one of ``leaves`` (a
    leaf-placed gang keeps its leaf; None: anywhere). The core decides on the snapshot of
    now with every other node cordoned; None when nothing fits now. A MIG lease is not
    replaced (not built: it is left degraded, ADR 0222)."""
    if lease.mig_profile:
        return None
    snap = snapshot()
    topology = snap.topology

    def candidate(node: core.Node) -> bool:
        if same_node is not None:
            return node.name == same_node
        if node.name in exclude:
            return False
        return leaves is None or bool(set(_leaves_of(topology, node.name)) & leaves)

    nodes = tuple(n if candidate(n) else replace(n, state=core.NodeState.CORDONED)
                  for n in snap.nodes)
    request = core.Request(
        id=f"{lease.pk}:repair", tenant=lease.tenant.slug, priority=PRIORITY[lease.priority],
        gpus=count, gpu_milli=lease.gpu_milli, models=frozenset({lease.gpu_model}), nodes=1,
        locality=None, start=int(now.timestamp()), end=int(lease.end_at.timestamp()),
        submitted_at=0)
    result = core.quote(replace(snap, nodes=nodes), request, int(now.timestamp()))
    placement = result.placement
    if not result.placeable_now or placement is None or placement.start > now.timestamp() + 1:
        return None
    return placement


def _leaves_of(topology: core.Topology, hostname: str) -> tuple[str, ...]:
    attached = topology.attach.get(hostname)
    if attached:
        return attached
    parent = topology.parent.get(hostname)
    return (parent,) if parent else ()


def lease_leaves(hostnames: Iterable[str]) -> frozenset[str]:
    """The leaf switches the given nodes hang off (the cached topology)."""
    topology = _topology()
    return frozenset(leaf for h in hostnames for leaf in _leaves_of(topology, h))


# MIG (ADR 0222): the orderable profiles and their GPU equivalents, and the MIG pass.
MigPick = migplace.MigPick
MigWait = migplace.MigWait


def mig_profiles(model: str) -> tuple[str, ...]:
    return migplace.profiles_of(model)


def mig_share_milli(model: str, profile: str) -> int:
    return migplace.share_milli(model, profile)


def mig_slices(model: str, profile: str) -> int:
    return migplace.memory_slices(model, profile)


MigLayoutError = migfixed.LayoutError
FixedLayout = migfixed.FixedLayout


def mig_config_layouts(document: Any, name: str, gpus: Mapping[int, str]
                       ) -> dict[int, migfixed.FixedLayout]:
    """Each GPU's fixed layout (``gpus``: index -> model) under config ``name`` of a loaded
    mig-parted document; ``MigLayoutError`` naming the field when it is bad (ADR 0238)."""
    return migfixed.layouts(migfixed.config(document, name), gpus, f"mig-configs.{name}")


def fixed_layout(own_mode: str, own_layout: Any, node_mode: str, node_layout: Any,
                 index: int) -> migfixed.FixedLayout | None:
    """A GPU's fixed layout when its mode (its own, else its node's) is ``fixed`` and a
    layout names it (its own, else its node's entry for it); None otherwise."""
    if (own_mode or node_mode) != MigMode.FIXED:
        return None
    if own_mode == MigMode.FIXED and own_layout:
        return migfixed.from_wire(own_layout)
    gpus = node_layout.get("gpus") if isinstance(node_layout, dict) else None
    return migfixed.from_wire(gpus.get(str(index))) if isinstance(gpus, dict) else None


def _fixed_rows() -> Iterable[tuple[str, int, migfixed.FixedLayout]]:
    rows = Gpu.objects.filter(Q(mig_mode=MigMode.FIXED) | Q(
        mig_mode="", node__mig_mode=MigMode.FIXED)).values_list(
        "node__hostname", "index", "mig_mode", "mig_layout", "node__mig_mode",
        "node__mig_layout")
    for hostname, index, own, own_layout, node_mode, node_layout in rows:
        layout = fixed_layout(own, own_layout, node_mode, node_layout, index)
        if layout is not None:
            yield hostname, index, layout


def fixed_mig_gpus() -> set[tuple[str, int]]:
    """(hostname, index) of each GPU in a fixed layout with MIG on: never used whole, by a
    fraction or a gang (hidden from the core, ADR 0238)."""
    return {(h, i) for h, i, layout in _fixed_rows() if layout.enabled}


def reported_split_gpus() -> set[tuple[str, int]]:
    """(hostname, index) of each GPU whose agent still reports MIG on there (enabled,
    pending a reset, or instances: ``Gpu.mig_reported_split``, kept by each report). A
    GPU switched to whole stays split until its agent has turned MIG off: no whole-GPU
    lease, gang or fraction goes there before (ADR 0244). One query on a partial index
    (the few GPUs still split), no node's observed document read."""
    return set(Gpu.objects.filter(mig_reported_split=True).values_list(
        "node__hostname", "index"))


def _mig_gpus(now: datetime) -> list[migplace.MigGpu]:
    """Every GPU as the MIG pass sees it, read now (the caller's transaction): mode (its
    own, else its node's), plain use from now on, and its live instances."""
    layout: dict[int, list[tuple[str, int]]] = defaultdict(list)
    spot: dict[int, list[tuple[str, tuple[str, int]]]] = defaultdict(list)
    for gpu_id, profile, start, lease_id, priority in MigInstance.objects.filter(
            allocation__live=True).values_list("gpu_id", "profile", "start", "lease_id",
                                               "lease__priority"):
        layout[gpu_id].append((profile, start))
        if priority == Priority.SPOT:
            spot[gpu_id].append((str(lease_id), (profile, start)))
    plain: dict[int, set[str | None]] = defaultdict(set)  # None: a use that is not spot
    for gpu_id, lease_id, priority in Allocation.objects.filter(
            live=True, lease__mig_profile="").filter(
            Q(end_at__gt=now) | Q(lease__state__in=LINGERING)).values_list(
            "gpu_id", "lease_id", "lease__priority").distinct():
        plain[gpu_id].add(str(lease_id) if priority == Priority.SPOT else None)
    unreachable = _unreachable()
    fixed = {(h, i): f for h, i, f in _fixed_rows() if f.enabled}
    out = []
    for pk, hostname, index, model, own, node_mode, health, service, state, node_service, \
            node_pk, agent in Gpu.objects.order_by("node__hostname", "index").values_list(
            "pk", "node__hostname", "index", "model", "mig_mode", "node__mig_mode", "health",
            "service", "node__state", "node__service", "node_id", "node__agent_version"):
        healthy = (health == Gpu.Health.HEALTHY and service in OFFERED
                   and _offered_state(state, node_service) == core.NodeState.READY
                   and node_pk not in unreachable)
        # an agent of the previous release ignores the MIG layout: whole use only there
        mig = protocol.supports(agent, "mig")
        fixed_here = fixed.get((hostname, index))
        if fixed_here is not None:
            mode = migplace.FIXED if mig else migplace.WHOLE  # WHOLE: offers nothing
        elif (own or node_mode) == MigMode.DYNAMIC and mig:
            mode = migplace.DYNAMIC
        else:
            mode = migplace.WHOLE
        users = plain.get(pk, set())
        out.append(migplace.MigGpu(
            node=hostname, index=index, model=model, mode=mode, plain=bool(users),
            healthy=healthy, layout=tuple(sorted(layout.get(pk, ()))),
            spot=tuple(sorted(spot.get(pk, ()))),
            plain_spot=() if None in users else tuple(sorted(u for u in users if u)),
            fixed=fixed_here.instances if fixed_here else ()))
    return out


def schedule_mig(queue: list[Lease], now: datetime,
                 ) -> dict[str, tuple[migplace.MigPick, ...] | migplace.MigWait]:
    """Place the MIG orders of ``queue`` (in its order) on the pool as it is now."""
    requests = [migplace.MigRequest(id=str(lease.pk), profile=lease.mig_profile,
                                    count=lease.gpu_count,
                                    models=frozenset(lease.allowed_models)) for lease in queue]
    return migplace.schedule(_mig_gpus(now), requests)


def mig_preempting(lease: Lease, now: datetime,
                   ) -> tuple[tuple[migplace.MigPick, ...], tuple[str, ...]] | None:
    """Where a MIG order that found no free placement goes if spot work gives way (ADR
    0241), and the spot leases that do; None for a spot order or when nothing fits."""
    if lease.priority == Priority.SPOT:
        return None
    request = migplace.MigRequest(id=str(lease.pk), profile=lease.mig_profile,
                                  count=lease.gpu_count, models=frozenset(lease.allowed_models))
    answer = migplace.place_preempting(_mig_gpus(now), request)
    if answer is None or not answer[1]:
        return None
    return answer[0], tuple(sorted(answer[1]))


def mig_replacement(lease: Lease, *, count: int, node: str | None, exclude: frozenset[str],
                    now: datetime,
                    ) -> tuple[tuple[migplace.MigPick, ...], tuple[str, ...]] | None:
    """Where ``count`` failed MIG instances of a running lease go now: on ``node`` (a GPU
    fault: beside its other instances) or on one node outside ``exclude`` (a node fault:
    all its instances move); failed GPUs are unhealthy, so never chosen. With no free room,
    spot work gives way to a paying lease's repair (ADR 0241: the fewest spot leases, as
    for whole GPUs). The picks and the spot leases to preempt; None: no room even so."""
    gpus = [g for g in _mig_gpus(now)
            if (g.node == node if node is not None else g.node not in exclude)]
    request = migplace.MigRequest(id=str(lease.pk), profile=lease.mig_profile, count=count,
                                  models=frozenset([lease.gpu_model] if lease.gpu_model
                                                   else lease.allowed_models))
    answer = migplace.schedule(gpus, [request])[request.id]
    if not isinstance(answer, migplace.MigWait):
        return answer, ()
    if lease.priority == Priority.SPOT:
        return None
    preempting = migplace.place_preempting(gpus, request)
    if preempting is None or not preempting[1]:
        return None
    return preempting[0], tuple(sorted(preempting[1]))


def mig_preview(lease: Lease, now: datetime) -> tuple[migplace.MigPick, ...] | migplace.MigWait:
    """Where an unsaved MIG order would go now (a quote)."""
    return schedule_mig([lease], now)[str(lease.pk)]


def mig_capable(models: Iterable[str]) -> bool:
    """Does any GPU of ``models`` run MIG on demand (mode dynamic, a MIG model)? Busy or
    unhealthy ones count: the order is accepted and waits (``mig_none``)."""
    wanted = set(models)
    return any(g.model in wanted and g.mode in (migplace.DYNAMIC, migplace.FIXED)
               and bool(migplace.profiles_of(g.model)) for g in _mig_gpus(clock.now()))


def mig_free_now(models: Iterable[str], profiles: Iterable[str], now: datetime,
                 cap: int) -> dict[str, int]:
    """Per profile, how many instances (one order each, up to ``cap``) the pool could take
    now; the pool read once."""
    gpus = _mig_gpus(now)
    out: dict[str, int] = {}
    for profile in profiles:
        wanted = frozenset(m for m in models if profile in migplace.profiles_of(m))
        requests = [migplace.MigRequest(id=str(i), profile=profile, count=1, models=wanted)
                    for i in range(cap if wanted else 0)]
        out[profile] = sum(1 for r in migplace.schedule(gpus, requests).values()
                           if not isinstance(r, migplace.MigWait))
    return out
