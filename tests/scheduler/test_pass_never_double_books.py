"""Property: whatever a pass decides, no GPU holds more than one GPU's worth of work.

Multi-request passes over random running leases (on-demand and spot, whole GPUs and
fractions) with every policy that keeps leaves — including the opt-in EASY hold and gang
reserve, whose refused preemptions once left their victims' GPUs free inside the pass
(ADR 0176 item 6). The leases still running after a pass are the snapshot's minus the
victims; with every placement added, each GPU holds at most 1,000 milli.
"""

from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import Locality, LocalityLevel, Placement, PriorityClass, schedule_pass

from .builders import hgx_cluster, lease, req, snap

NODES, TOPO = hgx_cluster(leaves=2, per_leaf=4)
NAMES = [n.name for n in NODES]
POLICIES = ("fgd+", "fgd+fabric", "fgd+fabric+hold", "fgd+fabric+reserve")
LEAF = Locality(LocalityLevel.LEAF, required=True)

running = st.lists(
    st.tuples(st.sampled_from(NAMES), st.sampled_from([(0, 8), (0, 4), (4, 8), (0, 1)]),
              st.sampled_from([1000, 1000, 500]), st.sampled_from([50, 100, 900, None]),
              st.sampled_from([PriorityClass.ON_DEMAND, PriorityClass.SPOT])),
    max_size=10)
queued = st.lists(
    st.tuples(st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 1, 2, 4]),
              st.booleans(), st.sampled_from([50, 100, 10_000]),
              st.sampled_from([PriorityClass.ON_DEMAND, PriorityClass.ON_DEMAND,
                               PriorityClass.SPOT]), st.sampled_from([1000, 1000, 500])),
    min_size=1, max_size=7)


def _leases(draws):
    """Running leases that fit together (a draw that would overfill a GPU is skipped)."""
    used: dict[tuple[str, int], int] = defaultdict(int)
    out = []
    for k, (node, (lo, hi), milli, end, prio) in enumerate(draws):
        gpus = list(range(lo, hi))
        if any(used[(node, g)] + milli > 1000 for g in gpus):
            continue
        for g in gpus:
            used[(node, g)] += milli
        out.append(lease(f"l{k}", node, gpus, milli=milli, end=end, priority=prio,
                         tenant="t1" if milli < 1000 else f"t{k % 3}"))
    return out


def _requests(draws):
    out = []
    for k, (gpus, nodes, leaf, end, prio, milli) in enumerate(draws):
        whole = nodes > 1 or milli == 1000
        out.append(req(f"r{k}", "t1", gpus=gpus if whole else 1,
                       gpu_milli=1000 if whole else milli, nodes=nodes,
                       locality=LEAF if nodes > 1 and leaf else None, start=0, end=end,
                       priority=prio, submitted_at=k))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(running=running, queue=queued, policy=st.sampled_from(POLICIES))
def test_no_pass_puts_more_than_a_gpu_on_a_gpu(running, queue, policy):
    leases = _leases(running)
    result = schedule_pass(snap(NODES, TOPO, leases=tuple(leases)), _requests(queue),
                           now=0, policy=policy)
    placed = [d for d in result.decisions if isinstance(d, Placement)]
    victims = {v for d in placed for v in d.victims}
    by_id = {le.id: le for le in leases}
    assert all(by_id[v].preemptible for v in victims)
    load: dict[tuple[str, int], int] = defaultdict(int)
    for le in leases:
        if le.id not in victims:
            for part in le.parts:
                for g, milli in part.gpus:
                    load[(part.node, g)] += milli
    for d in placed:
        for part in d.parts:
            for g, milli in part.gpus:
                load[(part.node, g)] += milli
    over = {gpu: milli for gpu, milli in load.items() if milli > 1000}
    assert not over, (policy, over)
