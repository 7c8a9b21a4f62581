import pytest

from scheduler.frag import FragModel
from scheduler.model import TaskType
from scheduler.nodestate import Shape, apply, make_key
from scheduler.policy import POLICIES, Policy, get_policy
from scheduler.scores import (
    ScoreContext,
    bestfit,
    cpu_strand,
    fgd,
    fgd_levels,
    gpu_left,
    locality,
    packing,
)

CTX = ScoreContext(FragModel((TaskType(0, 500, 1, frozenset(), 1.0),)), 64_000, 4)


def k(domains, cpu=64_000, cap=64_000):
    return make_key("A100", cap, 256_000, cpu, 256_000, domains)[0]


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


# Mix: one task of 1 GPU + 16 CPU cores -> 16 CPU milli per GPU milli.
CPU_CTX = ScoreContext(FragModel((TaskType(16_000, 1000, 1, frozenset(), 1.0),)), 64_000, 4)


def test_cpu_per_gpu_milli_of_the_mix_ignores_cpu_only_tasks():
    mix = (TaskType(16_000, 1000, 1, frozenset(), 0.5), TaskType(32_000, 0, 0, frozenset(), 0.5))
    assert FragModel(mix).cpu_per_milli == pytest.approx(16.0)
    assert FragModel((TaskType(8000, 0, 0, frozenset(), 1.0),)).cpu_per_milli == 0.0


@pytest.mark.parametrize(("cpu_free", "shape", "opt", "expected"), [
    # 4 idle GPUs need 64 cores; 64 free -> nothing stranded before; a CPU-only pod of
    # 32 cores leaves 32 cores for 4 GPUs: 2 GPUs stranded.
    (64_000, Shape(frozenset(), 0, 0, 32_000, 0), (), 2.0),
    # A GPU pod that takes its fair share of CPU strands nothing.
    (64_000, Shape(frozenset(), 1, 1000, 16_000, 0), ((0, 1),), 0.0),
    # A CPU-hungry GPU pod (40 cores for 1 GPU) strands 1.5 of the 3 GPUs left.
    (64_000, Shape(frozenset(), 1, 1000, 40_000, 0), ((0, 1),), 1.5),
    # Already CPU-poor node (16 cores for 4 GPUs = 3 stranded): taking 1 GPU with its
    # 16 cores leaves 3 GPUs and no CPU: still 3 stranded, no growth.
    (16_000, Shape(frozenset(), 1, 1000, 16_000, 0), ((0, 1),), 0.0),
])
def test_cpu_strand(cpu_free, shape, opt, expected):
    key = k([[1000, 1000, 1000, 1000]], cpu=cpu_free)
    got = cpu_strand(CPU_CTX, key, shape, opt, apply(key, shape, opt))
    assert got == pytest.approx(expected)


def test_default_policy_sends_a_cpu_only_pod_to_the_cpu_rich_node():
    """With FGD levels tied, fgd+ keeps CPU next to free GPUs; fgd-bestfit does not."""
    rich = k([[1000, 1000, 1000, 1000]], cpu=96_000, cap=128_000)  # 32 cores to spare
    poor = k([[1000, 1000, 1000, 1000]], cpu=40_000, cap=128_000)  # short of 24 cores
    cpu_pod = Shape(frozenset(), 0, 0, 16_000, 0)
    costs = {}
    for name in ("fgd+", "fgd-bestfit"):
        pol = get_policy(name)
        costs[name] = [pol.cost(CPU_CTX, key, cpu_pod, (), apply(key, cpu_pod, ()))
                       for key in (rich, poor)]
    assert costs["fgd+"][0] < costs["fgd+"][1]
    assert costs["fgd-bestfit"][1] < costs["fgd-bestfit"][0]
