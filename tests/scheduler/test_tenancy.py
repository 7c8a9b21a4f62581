"""Fractions within one tenant (issue 10.4): a GPU holding a fraction of tenant A is never
given (fractionally) to tenant B unless its node is marked shared tenancy."""

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import Placement, PriorityClass, Snapshot, Unplaceable, schedule_pass

from .builders import as_lease, lease, node, req, snap


def _fraction_holders(s: Snapshot) -> dict[tuple[str, int], set[str]]:
    shared = {n.name for n in s.nodes if n.shared_tenancy}
    out: dict[tuple[str, int], set[str]] = {}
    for le in s.leases:
        for p in le.parts:
            for g, m in p.gpus:
                if m < 1000 and p.node not in shared:
                    out.setdefault((p.node, g), set()).add(le.tenant)
    return out


def test_other_tenants_fraction_is_not_shared():
    s = snap((node("one", gpus=1),), leases=(lease("a", "one", [0], milli=500, tenant="A"),))
    d = schedule_pass(s, [req("b", tenant="B", gpu_milli=300)], now=0).decisions[0]
    assert isinstance(d, Unplaceable), d


def test_same_tenant_shares_its_gpu():
    s = snap((node("one", gpus=1),), leases=(lease("a", "one", [0], milli=500, tenant="A"),))
    d = schedule_pass(s, [req("a2", tenant="A", gpu_milli=300)], now=0).decisions[0]
    assert isinstance(d, Placement) and d.gpu_ids == (("one", 0),)


def test_shared_tenancy_node_shares_across_tenants():
    s = snap((node("one", gpus=1, shared_tenancy=True),),
             leases=(lease("a", "one", [0], milli=500, tenant="A"),))
    d = schedule_pass(s, [req("b", tenant="B", gpu_milli=300)], now=0).decisions[0]
    assert isinstance(d, Placement) and d.gpu_ids == (("one", 0),)


def test_other_tenant_gets_an_idle_gpu_of_the_same_node():
    s = snap((node("two", gpus=2),), leases=(lease("a", "two", [0], milli=500, tenant="A"),))
    d = schedule_pass(s, [req("b", tenant="B", gpu_milli=300)], now=0).decisions[0]
    assert isinstance(d, Placement) and d.gpu_ids == (("two", 1),)


def test_a_gpu_freed_by_its_tenant_is_open_to_others():
    s = snap((node("one", gpus=1),),
             leases=(lease("a", "one", [0], milli=500, tenant="A", end=100),))
    d = schedule_pass(s, [req("b", tenant="B", gpu_milli=300, end=50)], now=100).decisions[0]
    assert isinstance(d, Placement)


def test_preemption_does_not_share_a_foreign_fraction():
    held = (lease("a", "one", [0], milli=400, tenant="A"),
            lease("s", "one", [0], milli=600, tenant="A", priority=PriorityClass.SPOT))
    s = snap((node("one", gpus=1),), leases=held)
    d = schedule_pass(s, [req("b", tenant="B", gpu_milli=500)], now=0).decisions[0]
    assert isinstance(d, Unplaceable), d  # freeing the spot share leaves A's 400 there


ORDER = st.tuples(st.sampled_from(["A", "B", "C"]), st.sampled_from([100, 250, 300, 500, 700]),
                  st.booleans())


@settings(max_examples=60, deadline=None)
@given(orders=st.lists(ORDER, min_size=1, max_size=30),
       shared=st.sets(st.sampled_from(["n0", "n1", "n2"]), max_size=1))
def test_fraction_never_shared_across_tenants(orders, shared):
    nodes = tuple(node(f"n{i}", gpus=2, shared_tenancy=f"n{i}" in shared) for i in range(3))
    s = snap(nodes)
    for k, (tenant, milli, release_oldest) in enumerate(orders):
        if release_oldest and s.leases:
            s = replace(s, leases=s.leases[1:])
        d = schedule_pass(s, [req(f"r{k}", tenant=tenant, gpu_milli=milli)], now=0).decisions[0]
        if isinstance(d, Placement):
            s = replace(s, leases=(*s.leases, as_lease(d, tenant)))
        holders = _fraction_holders(s)
        assert all(len(ts) <= 1 for ts in holders.values()), holders




def test_a_full_gpu_of_another_tenant_is_not_masked():
    """Issue 30: a GPU with nothing free reads 0 in every view, so ``foreign`` leaves it
    out (the node's tenant view is then its own key); a partly used one stays listed."""
    from scheduler.tenancy import foreign

    held = {0: {"A": 1000}, 1: {"A": 500}}
    assert foreign(held, "B", {0: 0, 1: 500}, False) == {1}
    assert foreign(held, "A", {0: 0, 1: 500}, False) == set()


def test_only_nodes_with_a_partly_used_held_gpu_are_mixed():
    from scheduler.cluster import ClusterState
    from scheduler.context import score_context
    from scheduler.policy import get_policy

    s = snap((node("whole", gpus=2), node("part", gpus=2)),
             leases=(lease("w", "whole", [0], tenant="A"),
                     lease("p", "part", [0], milli=500, tenant="A")))
    state = ClusterState(s.nodes, get_policy(), score_context(s, []), s.leases)
    assert state.mixed == {1}
