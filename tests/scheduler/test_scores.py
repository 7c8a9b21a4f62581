import pytest

from scheduler.frag import FragModel
from scheduler.model import TaskType
from scheduler.nodestate import Shape, apply, make_key
from scheduler.policy import POLICIES, Policy, get_policy
from scheduler.scores import ScoreContext, bestfit, fgd, fgd_levels, gpu_left, locality, packing

CTX = ScoreContext(FragModel((TaskType(0, 500, 1, frozenset(), 1.0),)), 64_000, 4)


def k(domains, cpu=64_000):
    return make_key("A100", 64_000, 256_000, cpu, 256_000, domains)[0]


FRAC = Shape(frozenset(), 1, 500, 0, 0)
WHOLE2 = Shape(frozenset(), 2, 1000, 0, 0)


@pytest.mark.parametrize(("scorer", "domains", "shape", "opt", "expected"), [
    (bestfit, [[1000, 1000, 1000, 1000]], WHOLE2, ((0, 2),), 0.5 * 1 + 0.5 * 0.5),
    (bestfit, [[1000, 0, 0, 0]], FRAC, ((0, 1000),), 0.5 + 0.5 * 500 / 4000),
    (packing, [[1000, 1000, 1000, 0]], WHOLE2, ((0, 2),), 1 + 1000 / 4001),
    (fgd, [[1000, 1000]], FRAC, ((0, 1000),), 0.0),  # 500 left: still usable
    (fgd, [[1000, 700]], FRAC, ((0, 700),), 200.0),  # leaves a 200 fragment
    (fgd_levels, [[1000, 1000]], FRAC, ((0, 1000),), -50.0),
    (locality, [[1000, 1000], [1000, 1000]], Shape(frozenset(), 4, 1000, 0, 0),
     ((0, 2), (1, 2)), 1.0),
    (gpu_left, [[1000, 700]], FRAC, ((0, 700),), 200.0),
])
def test_scorers(scorer, domains, shape, opt, expected):
    key = k(domains)
    assert scorer(CTX, key, shape, opt, apply(key, shape, opt)) == pytest.approx(expected)


def test_policies_by_name():
    assert {"bestfit", "packing", "fgd", "fgd+"} <= set(POLICIES)
    with pytest.raises(ValueError, match="unknown policy"):
        get_policy("nope")
    with pytest.raises(ValueError, match="unknown scorer"):
        Policy("bad", ((("nope", 1.0),),))


def test_cost_is_lexicographic_over_tiers():
    pol = get_policy("fgd+")
    key = k([[1000, 1000]])
    c = pol.cost(CTX, key, FRAC, ((0, 1000),), apply(key, FRAC, ((0, 1000),)))
    assert len(c) == len(pol.tiers)
