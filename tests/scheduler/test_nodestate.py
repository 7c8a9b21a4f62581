import pytest

from scheduler.nodestate import NvlinkNeed, Shape, apply, make_key, options


def key(domains, cpu=64_000, mem=256_000, model="A100"):
    return make_key(model, 64_000, 256_000, cpu, mem, domains)[0]


def shape(gpus=1, milli=1000, cpu=0, mem=0, models=frozenset(), nvlink=NvlinkNeed.NONE):
    return Shape(frozenset(models), gpus, milli, cpu, mem, nvlink)


@pytest.mark.parametrize(("domains", "shp", "expected"), [
    # fractional: every distinct GPU value that fits, least free first (pack partly used)
    ([[1000, 400, 700]], shape(milli=300), [((0, 400),), ((0, 700),), ((0, 1000),)]),
    ([[1000, 200]], shape(milli=300), [((0, 1000),)]),
    ([[200, 100]], shape(milli=300), []),
    # whole GPUs: the fullest NVLink domain that still holds the request
    ([[1000] * 4, [1000, 1000, 0, 0]], shape(gpus=2), [((0, 2),)]),
    ([[1000] * 4, [1000, 0, 0, 0]], shape(gpus=4), [((1, 4),)]),
    # spanning domains only when allowed
    ([[1000, 1000, 0, 0], [1000, 1000, 1000, 0]], shape(gpus=4), [((0, 1), (1, 3))]),
    ([[1000, 1000, 0, 0], [1000, 1000, 1000, 0]],
     shape(gpus=4, nvlink=NvlinkNeed.REQUIRED), []),
    # CPU, memory and model filters
    ([[1000]], shape(cpu=70_000), []),
    ([[1000]], shape(mem=300_000), []),
    ([[1000]], shape(models={"H100"}), []),
    ([[1000]], shape(models={"A100", "H100"}), [((0, 1),)]),
    ([], shape(gpus=0, cpu=1000), [()]),
])
def test_options(domains, shp, expected):
    assert options(key(domains), shp) == expected


def test_apply_takes_the_chosen_gpus_and_host_resources():
    k = key([[1000, 400]])
    new = apply(k, shape(milli=300, cpu=1000, mem=10), ((0, 400),))
    assert new[5] == ((1000, 100),)
    assert new[3] == 63_000
    assert new[4] == 255_990


def test_key_is_canonical_over_gpu_order_and_domain_order():
    assert key([[0, 1000], [500]]) == key([[500], [1000, 0]])
