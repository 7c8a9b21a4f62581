"""``python -m scheduler.bench fabric``: gang wait and leaf fragmentation per policy.

Generated fabrics (``scheduler.fabrics``): a 2-tier fat tree (32 leaves × 16 nodes × 8
GPUs), a 3-tier fat tree (4 pods × 8 leaves × 16 nodes) and a rail-optimised one (16
SuperPOD-style units × 32 nodes, 8 rails), 4,096 GPUs each. A seeded timeline workload
(:func:`workload`, written as CSV with ``--csv`` so others can replay it with
``--workload``) mixes, by count:

- 30% fractional (250 or 500 milli-GPU), 1 h mean duration;
- 55% single-node 1/2/4/8 GPUs (weights 4/2/2/2), 2 h mean;
- 15% gangs of 8-GPU nodes, 2/4/8/16 nodes (weights 4/3/2/1), 4 h mean; 70% of them
  require one leaf (one rail group on the rail-optimised fabric), 30% prefer it;

arrivals are Poisson at a rate that offers ``--load`` × capacity, durations exponential;
each job runs for its duration from the moment it is placed. Waiting jobs are retried in
arrival order (first ``RETRY_WINDOW``) on every arrival and departure. With ``fgd+`` (and
any policy without the fabric score) smaller jobs may pass a waiting gang freely; the
fabric policies apply the core's EASY reservation (``scheduler.reservation``): the first
waiting leaf-required gang holds the nodes of the leaf that frees soonest, and only jobs
that end by its reserved start may use them (backfill).

Printed per fabric, policies side by side: time-weighted GPU allocation and leaf
fragmentation (share of free GPUs that sit in leaves unable to host the median gang),
both from the arrival of the first fifth of the jobs (warm-up) to the last arrival; gang
wait p50/p95 (s); the wait of the other orders (fractional and single-node: what a
policy that favours gangs costs them); share of gangs placed under one leaf; jobs never
placed; jobs refused at the door because they can never fit the fabric (``never_fits``).

``--reference`` adds rows that are not policies but bounds on what placement can do:
``no-leaf`` replays each policy with every gang's leaf requirement dropped (a gang may
take any nodes: no leaf fragmentation can hold it back), ``fluid`` runs the workload on
one bin of the fabric's GPUs (:mod:`scheduler.bench.fluidpool`: no nodes, no leaves at all).
"""

from __future__ import annotations

import csv
import dataclasses
import heapq
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheduler.attempt import Found, commit, find, shape_of
from scheduler.bench.fluidpool import simulate_fluid
from scheduler.bench.gangwait import BUCKETS, NEVER, Moment, WaitCauses
from scheduler.bench.replay.snapshot import percentile
from scheduler.cluster import ClusterState
from scheduler.context import score_context
from scheduler.fabric import KEEP_LEAVES, FabricModel, LeafTracker, drain_leaves, typical_gang
from scheduler.fabrics import fat_tree_2tier, fat_tree_3tier, superpod
from scheduler.feasibility import never_fits
from scheduler.model import (
    MILLI,
    Lease,
    Locality,
    LocalityLevel,
    Node,
    NodeAllocation,
    PriorityClass,
    Request,
    Snapshot,
    Topology,
)
from scheduler.nodestate import Shape
from scheduler.policy import get_policy
from scheduler.preempt import find_with_victims
from scheduler.reservation import plan_hold
from scheduler.reserve import plan_reserve
from scheduler.scores import ScoreContext

RETRY_WINDOW = 128
REFERENCES = ("no-leaf", "fluid")  # rows that bound what placement can do (--reference)
NO_LEAF = " no-leaf"  # suffix of a policy's row replayed without leaf requirements
FIELDS = ("id", "arrival_s", "duration_s", "kind", "gpus", "gpu_milli", "nodes",
          "leaf_required", "tenant", "spot")


@dataclass(frozen=True)
class Job:
    id: str
    arrival: int
    duration: int
    kind: str  # fractional | single | gang
    gpus: int
    gpu_milli: int
    nodes: int
    leaf_required: bool
    tenant: str
    spot: bool = False  # preemptible (--spot): any other order may reclaim it

    @property
    def milli(self) -> int:
        return self.gpus * self.gpu_milli * self.nodes

    def request(self, at: int = 0) -> Request:
        """The job as a request starting at ``at`` (its end matters to reservations)."""
        loc = Locality(LocalityLevel.LEAF, self.leaf_required) if self.nodes > 1 else None
        return Request(self.id, self.tenant, gpus=self.gpus, gpu_milli=self.gpu_milli,
                       nodes=self.nodes, locality=loc, start=at,
                       end=at + max(1, self.duration),
                       priority=PriorityClass.SPOT if self.spot else PriorityClass.ON_DEMAND)


def fabrics() -> dict[str, tuple[tuple[Node, ...], Topology]]:
    return {
        "2-tier": fat_tree_2tier(leaves=32, per_leaf=16, spines=8),
        "3-tier": fat_tree_3tier(pods=4, leaves_per_pod=8, per_leaf=16, aggs_per_pod=4),
        "rail": superpod(units=16, nodes_per_unit=32, rails=8),
    }


def _draw(rng: random.Random, i: int, t: int) -> Job:
    roll = rng.random()
    tenant = f"t{rng.randrange(4)}"
    if roll < 0.30:
        return Job(f"j{i}", t, _exp(rng, 3600), "fractional", 1, rng.choice((250, 500)), 1,
                   False, tenant)
    if roll < 0.85:
        gpus = rng.choices((1, 2, 4, 8), (4, 2, 2, 2))[0]
        return Job(f"j{i}", t, _exp(rng, 7200), "single", gpus, MILLI, 1, False, tenant)
    nodes = rng.choices((2, 4, 8, 16), (4, 3, 2, 1))[0]
    return Job(f"j{i}", t, _exp(rng, 14_400), "gang", 8, MILLI, nodes, rng.random() < 0.7,
               tenant)


def _exp(rng: random.Random, mean: float) -> int:
    return max(60, int(rng.expovariate(1 / mean)))


def workload(seed: int, jobs: int, capacity_gpus: int, load: float,
             spot: float = 0.0) -> list[Job]:
    """Seeded jobs whose offered GPU-seconds per second are ``load`` × capacity; a share
    ``spot`` of the fractional and single-node jobs is spot (drawn from a generator of
    its own, so every share keeps the same arrivals, sizes and durations)."""
    rng = random.Random(seed)
    drafts = [_draw(rng, i, 0) for i in range(jobs)]
    mean_work = sum(j.milli / MILLI * j.duration for j in drafts) / jobs
    rate = load * capacity_gpus / mean_work  # arrivals per second
    t = 0.0
    out = []
    for job in drafts:
        t += rng.expovariate(rate)
        out.append(Job(job.id, int(t), job.duration, job.kind, job.gpus, job.gpu_milli,
                       job.nodes, job.leaf_required, job.tenant))
    if spot > 0:
        marks = random.Random(f"spot-{seed}")
        out = [dataclasses.replace(j, spot=marks.random() < spot) if j.kind != "gang" else j
               for j in out]
    return out


def write_csv(path: str | Path, jobs: Sequence[Job]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(FIELDS)
        for j in jobs:
            w.writerow((j.id, j.arrival, j.duration, j.kind, j.gpus, j.gpu_milli, j.nodes,
                        int(j.leaf_required), j.tenant, int(j.spot)))


def read_csv(path: str | Path) -> list[Job]:
    with open(path, newline="") as fh:
        return [Job(r["id"], int(r["arrival_s"]), int(r["duration_s"]), r["kind"],
                    int(r["gpus"]), int(r["gpu_milli"]), int(r["nodes"]),
                    r["leaf_required"] == "1", r["tenant"], r.get("spot", "0") == "1")
                for r in csv.DictReader(fh)]


def context(nodes: Sequence[Node], topology: Topology, jobs: Sequence[Job]) -> ScoreContext:
    """The scoring context a pass would build: task mix from the workload, the fabric's
    leaves and the workload's median gang."""
    reqs = [j.request() for j in jobs[:2000]]
    ctx = score_context(Snapshot(tuple(nodes), topology), reqs)
    leaf_of = {n.name: leaf for n in nodes if (leaf := topology.leaf_of(n.name))}
    sizes: dict[str, int] = {}
    for leaf in leaf_of.values():
        sizes[leaf] = sizes.get(leaf, 0) + 1
    keep = max((j.nodes for j in jobs if j.leaf_required and j.nodes > 1
                and j.nodes <= max(sizes.values(), default=0)), default=None)
    fabric = FabricModel(leaf_of, typical_gang(j.nodes for j in jobs), 1, keep_for=keep,
                         keep_leaves=KEEP_LEAVES)
    return ScoreContext(ctx.frag, ctx.max_cpu, ctx.max_gpus, ctx.model_pressure, fabric)


class _Sim:
    """One fabric, one policy: a persistent working state driven by arrivals/departures."""

    def __init__(self, nodes: Sequence[Node], topology: Topology, policy: str,
                 ctx: ScoreContext, gang_nodes: int) -> None:
        self.state = ClusterState(nodes, get_policy(policy), ctx)
        self.holds = get_policy(policy).holds
        self.reserve = get_policy(policy).reserve  # gang reserve settings (None: off)
        self.topology, self.gang_nodes = topology, gang_nodes
        self.capacity = sum(len(n.gpus) for n in nodes) * MILLI
        self.allocated = 0
        self.waiting: list[Job] = []
        self.running: dict[str, tuple[tuple[NodeAllocation, ...], Job]] = {}
        self.gang_waits: list[float] = []
        self.other_waits: list[float] = []  # fractional and single-node orders
        self.spot: dict[str, Lease] = {}  # running spot jobs, as leases (reclaimable)
        self.started: dict[str, int] = {}
        self.requeued: list[Job] = []  # preempted spot jobs, back in the queue next event
        self.preemptions = 0
        self.gang_wait_of: dict[str, float] = {}
        self.gangs_local = 0
        self.area = self.frag_area = 0.0
        self.last_t = 0
        self.window = (0, 0)  # measured: from the warm-up arrival to the last arrival
        self.leaf_of = dict(ctx.fabric.leaf_of) if ctx.fabric else {}
        # Leaf membership for the fragmentation metric (the same for every policy).
        self.tracker = LeafTracker(ctx.fabric, self.state.names) if ctx.fabric else None
        self.free_at: dict[str, float] = {}  # node -> end of the last job placed there
        # Why gangs wait (scheduler.bench.gangwait): arrival rank per job, ranks per node.
        self.rank: dict[str, int] = {}
        self.on_node: dict[str, dict[str, int]] = {n.name: {} for n in nodes}
        self.causes = WaitCauses()
        self.pending: list[tuple[str, str]] = []  # (gang, bucket) until the next event

    def advance(self, t: int) -> None:
        for gang, bucket in self.pending:
            self.causes.add(gang, bucket, float(t - self.last_t))
        lo, hi = self.window
        dt = min(t, hi) - max(self.last_t, lo)
        if dt > 0:
            self.area += self.allocated / self.capacity * dt
            self.frag_area += self.leaf_fragmentation() * dt
        self.last_t = t

    def leaf_fragmentation(self) -> float:
        """Share of free GPU milli in leaves with fewer idle nodes than the median gang."""
        leaves = self.tracker
        if leaves is None:
            return 0.0
        free_total = stranded = 0
        for members in leaves.members:
            free = sum(sum(self.state.gpu_free[i].values()) for i in members)
            idle = sum(1 for i in members if self.state.ready[i] and all(
                v == MILLI for v in self.state.gpu_free[i].values()))
            free_total += free
            if idle < self.gang_nodes:
                stranded += free
        return stranded / free_total if free_total else 0.0

    def try_place(self, job: Job, t: int) -> bool:
        req = job.request(t)
        shape = shape_of(req)
        found = find(self.state, req, shape, self.topology)
        if found is None and not job.spot and self.spot:
            found = self.reclaim(req, shape, t)
        if found is None:
            return False
        self.start(job, commit(self.state, shape, found), t, found.hops == 0)
        return True

    def start(self, job: Job, parts: tuple[NodeAllocation, ...], t: int,
              local: bool = True) -> None:
        """Book a job started at ``t`` on ``parts`` (already taken in the state)."""
        self.running[job.id] = (parts, job)
        self.started[job.id] = t
        if job.spot:
            self.spot[job.id] = Lease(job.id, _holder(job), PriorityClass.SPOT, parts, t,
                                      t + job.duration)
        for part in parts:
            self.on_node[part.node][job.id] = self.rank.get(job.id, 0)
            self.free_at[part.node] = max(self.free_at.get(part.node, 0.0),
                                          float(t + job.duration))
        self.allocated += job.milli
        if job.kind == "gang":
            self.gang_waits.append(float(t - job.arrival))
            self.gang_wait_of[job.id] = float(t - job.arrival)
            self.gangs_local += local
        else:
            self.other_waits.append(float(t - job.arrival))

    def reclaim(self, req: Request, shape: Shape, t: int) -> Found | None:
        """A placement after preempting running spot jobs, as a pass would (the core's
        ``find_with_victims``, which keeps off nodes a hold or reserve keeps from the
        request). Each victim goes back to the queue with the rest of its duration."""
        pre = find_with_victims(self.state, req, shape, self.topology,
                                list(self.spot.values()))
        if pre is None:
            return None
        for victim in pre.victims:  # the search released them in the state already
            _, job = self.running[victim.id]
            left = self.started[victim.id] + job.duration - t
            self.forget(victim.id)
            self.preemptions += 1
            again = dataclasses.replace(job, id=f"{job.id}~{self.preemptions}", arrival=t,
                                        duration=max(1, left))
            self.rank[again.id] = len(self.rank)
            self.requeued.append(again)
        return pre.found

    def depart(self, job_id: str) -> None:
        """A job ends (a departure of a job preempted earlier is ignored)."""
        if job_id not in self.running:
            return
        for part in self.running[job_id][0]:
            self.state.release(part, _holder(self.running[job_id][1]))
        self.forget(job_id)

    def forget(self, job_id: str) -> None:
        """Drop a job from the books (its resources are released by the caller)."""
        parts, job = self.running.pop(job_id)
        self.spot.pop(job_id, None)
        self.started.pop(job_id, None)
        for part in parts:
            self.on_node[part.node].pop(job_id, None)
        self.allocated -= job.milli

    def plan(self, t: int) -> None:
        """What a pass would decide about leaves now (fabric policies only): the largest
        waiting leaf-required gang, else the largest one seen (``keep_for``), has a leaf
        kept for it, or drained by the calendar when no leaf can host it; with a hold
        policy the waiting gang gets an EASY reservation (``plan_hold``) instead."""
        leaves = self.state.leaves
        if leaves is None:
            return
        gangs = [j for j in self.waiting if j.leaf_required and j.nodes > 1]
        if self.reserve is not None:  # the reserve replaces drains and the EASY hold
            self.state.set_reserve(plan_reserve(
                [(j.id, j.nodes) for j in gangs], leaves.keep_for, self.leaf_of,
                self.free_at, t, self.reserve))
            self.state.set_drain(None, None)
            self.state.set_drains([])
            return
        head = max(gangs, key=lambda j: j.nodes, default=None)
        fits = head is None or any(n >= head.nodes for n in leaves.idle)
        hold = None if fits or not self.holds or head is None else plan_hold(
            head.id, head.nodes, self.leaf_of, self.free_at, t)
        self.state.set_hold(hold)
        if hold is not None:  # work admitted by the hold may use the held leaf freely
            self.state.set_drain(None, None)
            self.state.set_drains([])
            return
        keep = leaves.keep_for
        needs = [j.nodes for j in gangs] or ([keep] * KEEP_LEAVES if keep else [])
        idle = {name: leaves.idle[lid] for name, lid in leaves.leaf_ids.items()}
        drains = drain_leaves(self.leaf_of, self.free_at, needs, idle)
        self.state.set_drain(None if head is None else head.nodes, None)
        self.state.set_drains(drains)

    def classify(self) -> None:
        """Put every waiting gang in a wait bucket until the next event."""
        gangs = [j for j in self.waiting if j.kind == "gang"]
        self.pending = []
        if not gangs:
            return
        first = {n: min(jobs.values(), default=NEVER) for n, jobs in self.on_node.items()}
        running = [(self.rank.get(j.id, 0), j.milli / MILLI) for _, j in self.running.values()]
        moment = Moment.build(first, self.leaf_of, (self.capacity - self.allocated) / MILLI,
                              running)
        self.pending = [(j.id, moment.classify(self.rank.get(j.id, 0), j.nodes, j.gpus,
                                               j.leaf_required)) for j in gangs]

    def retry(self, t: int) -> list[Job]:
        """Try the first ``RETRY_WINDOW`` waiting jobs, spot ones after the others (as a
        pass orders its queue by priority class), each class in arrival order."""
        placed: list[Job] = []
        keep: list[Job] = []
        waiting = self.waiting = sorted(self.waiting, key=lambda j: j.spot)
        for k, job in enumerate(waiting):
            if k < RETRY_WINDOW and self.try_place(job, t):
                placed.append(job)
                hold = self.state.hold
                if ((hold is not None and hold.owner == job.id)  # the next gang is head
                        or (self.reserve is not None and job.nodes > 1)):  # re-plan leaves
                    self.waiting = keep + waiting[k + 1:]
                    self.plan(t)
            else:
                keep.append(job)
        self.waiting = keep + self.requeued
        self.requeued = []
        return placed


def _holder(job: Job) -> str:
    """Whom the working state records as holding the job's GPUs: the tenant for a
    fraction (tenancy of shared GPUs), nobody for whole GPUs (as ``shape_of``)."""
    return job.tenant if job.gpu_milli < MILLI else ""


def simulate(nodes: Sequence[Node], topology: Topology, jobs: Sequence[Job], policy: str,
             ctx: ScoreContext) -> dict[str, Any]:
    hardware = Snapshot(tuple(nodes), topology)
    refused = [j for j in jobs if never_fits(j.request(), hardware) is not None]
    jobs = [j for j in jobs if never_fits(j.request(), hardware) is None]
    gang = typical_gang(j.nodes for j in jobs) or 1
    sim = _Sim(nodes, topology, policy, ctx, gang)
    sim.window = (jobs[len(jobs) // 5].arrival, jobs[-1].arrival)
    sim.rank = {j.id: k for k, j in enumerate(jobs)}
    events: list[tuple[int, int, str]] = [(j.arrival, 1, j.id) for j in jobs]
    heapq.heapify(events)
    by_id = {j.id: j for j in jobs}
    while events:
        t, kind, job_id = heapq.heappop(events)
        sim.advance(t)
        if kind == 0:
            sim.depart(job_id)
        else:
            sim.waiting.append(by_id[job_id])
        sim.plan(t)
        for job in sim.retry(t):
            heapq.heappush(events, (t + job.duration, 0, job.id))
        sim.classify()
    gangs = sum(1 for j in jobs if j.kind == "gang")
    span = max(sim.window[1] - sim.window[0], 1)
    p95 = percentile(sim.gang_waits, 95)
    tail = [g for g, w in sim.gang_wait_of.items() if w >= p95 and w > 0]
    why = sim.causes.shares()
    why_tail = sim.causes.shares(tail)
    return {
        "policy": policy,
        "alloc_pct": round(100 * sim.area / span, 2),
        "gang_wait_p50_s": percentile(sim.gang_waits, 50),
        "gang_wait_p95_s": percentile(sim.gang_waits, 95),
        "gang_wait_mean_s": round(sum(sim.gang_waits) / max(len(sim.gang_waits), 1), 1),
        "other_wait_mean_s": round(statistics.fmean(sim.other_waits), 1)
        if sim.other_waits else 0.0,
        "other_wait_p95_s": percentile(sim.other_waits, 95),
        "gangs_one_leaf_pct": round(100 * sim.gangs_local / max(len(sim.gang_waits), 1), 1),
        "leaf_frag_pct": round(100 * sim.frag_area / span, 2),
        "gangs": gangs,
        "never_placed": len(sim.waiting),
        "preempted": sim.preemptions,  # spot jobs sent back to the queue (--spot)
        "refused": len(refused),  # can never fit this fabric (scheduler.never_fits)
        **{f"wait_{b}_pct": why[b] for b in BUCKETS},
        **{f"tail_{b}_pct": why_tail[b] for b in BUCKETS},
        # wait_leaf_frag_pct's points per gang size (nodes): where the share comes from
        "leaf_frag_by_nodes": sim.causes.points_by(
            "leaf_frag", {j.id: j.nodes for j in jobs if j.kind == "gang"}),
    }


def without_leaf_requirement(jobs: Sequence[Job]) -> list[Job]:
    """The same jobs with every gang's leaf requirement dropped (``no-leaf`` rows)."""
    return [dataclasses.replace(j, leaf_required=False) for j in jobs]


def fluid_row(nodes: Sequence[Node], topology: Topology, jobs: Sequence[Job],
              headroom_gpus: int = 0) -> dict[str, Any]:
    """The ``fluid`` reference row: the jobs the simulator would admit, on one bin of the
    fabric's GPUs (orders that are not gangs may not take the last ``headroom_gpus``);
    the columns that need nodes or leaves read ``-``."""
    hardware = Snapshot(tuple(nodes), topology)
    fits = [j for j in jobs if never_fits(j.request(), hardware) is None]
    row: dict[str, Any] = dict.fromkeys(COLUMNS, "-")
    row.update(simulate_fluid(fits, sum(len(n.gpus) for n in nodes), headroom_gpus))
    name = f"fluid headroom {headroom_gpus}" if headroom_gpus else "fluid"
    row.update(policy=name, refused=len(jobs) - len(fits),
               gangs=sum(1 for j in fits if j.kind == "gang"))
    return row


@dataclass(frozen=True)
class Extras:
    """What a run adds to the plain comparison: reference rows (``REFERENCES``), the fluid
    rows' headroom for gangs (GPUs, one row each) and the spot share of the workload."""

    references: tuple[str, ...] = ()
    fluid_headroom: tuple[int, ...] = (0,)
    spot: float = 0.0


NO_EXTRAS = Extras()


def run(policies: Sequence[str], jobs_n: int, seed: int, load: float,
        workload_csv: str | None, csv_out: str | None,
        only: Sequence[str] | None = None,
        extras: Extras = NO_EXTRAS) -> list[tuple[str, list[dict[str, Any]]]]:
    references = extras.references
    out = []
    for name, (nodes, topo) in fabrics().items():
        if only and name not in only:
            continue
        gpus = sum(len(n.gpus) for n in nodes)
        jobs = (read_csv(workload_csv) if workload_csv
                else workload(seed, jobs_n, gpus, load, extras.spot))
        if csv_out:
            write_csv(csv_out, jobs)
        ctx = context(nodes, topo, jobs)
        rows = [simulate(nodes, topo, jobs, p, ctx) for p in policies]
        if "no-leaf" in references:
            relaxed = without_leaf_requirement(jobs)
            relaxed_ctx = context(nodes, topo, relaxed)
            rows += [{**simulate(nodes, topo, relaxed, p, relaxed_ctx), "policy": p + NO_LEAF}
                     for p in policies]
        if "fluid" in references:
            rows += [fluid_row(nodes, topo, jobs, kept) for kept in extras.fluid_headroom]
        out.append((name, rows))
    return out


COLUMNS = ("alloc_pct", "gang_wait_mean_s", "gang_wait_p50_s", "gang_wait_p95_s",
           "other_wait_mean_s", "other_wait_p95_s",
           "gangs_one_leaf_pct", "leaf_frag_pct", "never_placed", "refused", "preempted",
           *(f"wait_{b}_pct" for b in BUCKETS), *(f"tail_{b}_pct" for b in BUCKETS))


def render(results: Sequence[tuple[str, list[dict[str, Any]]]]) -> str:
    lines = []
    for fabric, rows in results:
        lines.append(f"== {fabric} ({rows[0]['gangs']} gangs)")
        names = [f"{r['policy']} (today)" if r["policy"] == "fgd+" else r["policy"]
                 for r in rows]
        lines.append(f"{'metric':<20}" + "".join(f"{n:>21}" for n in names))
        for col in COLUMNS:
            lines.append(f"{col:<20}" + "".join(f"{r[col]:>21}" for r in rows))
    return "\n".join(lines)
