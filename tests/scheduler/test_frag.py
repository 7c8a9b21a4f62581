from pathlib import Path

import pytest

from scheduler.frag import FragModel, node_fragmentation, task_fragment, typical_task_mix
from scheduler.model import TaskType
from scheduler.nodestate import make_key

ANY = frozenset()


def t(cpu=0, milli=1000, gpus=1, models=ANY):
    return TaskType(cpu, milli, gpus, frozenset(models), 1.0)


@pytest.mark.parametrize(("frees", "cpu_free", "task", "expected"), [
    ([1000, 1000], 8000, t(milli=500), 0),  # both GPUs usable
    ([1000, 300], 8000, t(milli=500), 300),  # the 300 share is a fragment
    ([300, 200], 8000, t(milli=500), 500),  # task cannot run: all free is fragment
    ([1000, 1000], 1000, t(cpu=2000), 2000),  # lacks CPU: all free is fragment
    ([1000, 600], 8000, t(gpus=2), 1600),  # needs two idle GPUs
    ([1000, 1000, 600], 8000, t(gpus=2), 600),
    ([1000], 8000, t(milli=0, gpus=0), 1000),  # CPU-only tasks use no GPU
    ([1000], 8000, t(models={"H100"}), 1000),  # wrong model
])
def test_task_fragment(frees, cpu_free, task, expected):
    assert task_fragment("A100", cpu_free, frees, sum(frees), task) == expected


def test_node_fragmentation_is_the_expectation_over_the_mix():
    mix = (TaskType(0, 500, 1, ANY, 0.5), TaskType(0, 1000, 2, ANY, 0.5))
    assert node_fragmentation("A100", 0, [1000, 300], mix) == pytest.approx(0.5 * 300 + 0.5 * 1300)
    assert node_fragmentation("A100", 0, [0, 0], mix) == 0


def test_frag_model_caches_by_state():
    model = FragModel((TaskType(0, 500, 1, ANY, 1.0),))
    k = make_key("A100", 1, 1, 0, 0, [[1000, 300]])[0]
    assert model.frag(k) == 300 == model.frag(k)


def test_typical_mix_covers_95_percent_and_renormalises():
    tasks = [(0, 1000, 1, ANY)] * 90 + [(0, 500, 1, ANY)] * 6 + [(0, 100, 1, ANY)] * 4
    mix = typical_task_mix(tasks)
    assert [m.gpu_milli for m in mix] == [1000, 500]
    assert sum(m.weight for m in mix) == pytest.approx(1.0)


def test_typical_mix_of_the_openb_trace_has_35_types():
    path = Path("/work/shared/bench/traces/openb_pod_list_default.csv")
    if not path.exists():
        pytest.skip("openb trace not present")
    from scheduler.bench.replay.trace import load_pods, task_mix

    assert len(task_mix(load_pods(path))) == 35
