"""Orders that can never fit are refused with a structured reason (issue 11.3)."""

import pytest

from scheduler import (
    Limit,
    Locality,
    LocalityLevel,
    NodeState,
    Unplaceable,
    never_fits,
    schedule_pass,
)

from .builders import hgx_cluster, node, req, snap

LEAF = Locality(LocalityLevel.LEAF, required=True)


def _pool():
    """32 H100 nodes × 8 = 256 H100 under 4 leaves of 8, plus two 4-GPU A100 boxes."""
    nodes, topo = hgx_cluster(leaves=4, per_leaf=8)
    return snap((*nodes, node("a0", "A100", 4, 2), node("a1", "A100", 4, 2)), topo)


def test_never_fitting_order_is_refused():
    # finding 11.3: 9 nodes × 8 with leaf locality required, on leaves of 8 nodes
    s = _pool()
    r = req("g", gpus=8, nodes=9, locality=LEAF, models=frozenset({"H100"}))
    why = never_fits(r, s)
    assert why is not None
    assert (why.limit, why.field, why.asked, why.most) == (Limit.LOCAL_NODES, "nodes", 9, 8)
    assert why.detail == "no leaf holds 9 H100 nodes (at most 8)"
    # the engine itself would only have queued it
    d = schedule_pass(s, [r], now=0).decisions[0]
    assert isinstance(d, Unplaceable) and d.earliest_start is None


@pytest.mark.parametrize(("kw", "limit", "field", "asked", "most"), [
    ({"gpus": 8, "nodes": 33, "models": frozenset({"H100"})}, Limit.POOL_GPUS, "gpus", 264, 256),
    ({"gpus": 8, "models": frozenset({"A100"})}, Limit.NODE_GPUS, "gpus", 8, 4),
    ({"gpus": 1, "models": frozenset({"B200"})}, Limit.MODEL, "models", 1, 0),
    ({"gpus": 4, "models": frozenset({"A100"}),
      "locality": Locality(LocalityLevel.NVLINK, required=True)}, Limit.NVLINK, "gpus", 4, 2),
    ({"gpus": 1, "cpu_milli": 500_000}, Limit.NODE_CPU, "cpu_milli", 500_000, 128_000),
    ({"gpus": 1, "memory_mib": 2**30}, Limit.NODE_MEMORY, "memory_mib", 2**30, 1_048_576),
    ({"gpus": 2, "nodes": 3, "models": frozenset({"A100"})}, Limit.POOL_NODES, "nodes", 3, 2),
])
def test_never_fits_reasons(kw, limit, field, asked, most):
    why = never_fits(req("r", **kw), _pool())
    assert why is not None
    assert (why.limit, why.field, why.asked, why.most) == (limit, field, asked, most)


@pytest.mark.parametrize("kw", [
    {"gpus": 8, "nodes": 8, "locality": LEAF},
    {"gpus": 8, "nodes": 9},  # leaf preferred, not required: may span leaves
    {"gpus": 8, "nodes": 16, "locality": Locality(LocalityLevel.SPINE, True, 1)},
    {"gpu_milli": 125},
    {"gpus": 4, "models": frozenset({"A100"})},
])
def test_orders_that_can_fit_some_day_pass(kw):
    assert never_fits(req("r", **kw), _pool()) is None


def test_a_node_down_today_still_counts():
    s = snap((node("n", state=NodeState.DOWN),))
    assert never_fits(req("r", gpus=8), s) is None
