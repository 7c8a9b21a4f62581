"""Property: whatever sequence of layouts the portal asks for, and whichever NVML calls fail
on the way, one failure-free reconcile leaves the GPU holding exactly the last layout —
no orphan, no overlap (the fake NVML refuses overlaps as NVML does)."""

from __future__ import annotations

import pynvml
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.nvml import mig as agent_mig
from agents.nvml.fake import FakeNvml
from scheduler import mig

H100 = mig.CATALOGUE["H100"]
FAILING = ["nvmlGpuInstanceCreateComputeInstance", "nvmlGpuInstanceDestroy",
           "nvmlComputeInstanceDestroy", "nvmlDeviceCreateGpuInstanceWithPlacement"]


@st.composite
def layouts(draw: st.DrawFn) -> list[mig.Instance]:
    layout: list[mig.Instance] = []
    for pick in draw(st.lists(st.integers(0, len(H100.profiles) - 1), max_size=7)):
        profile = H100.profiles[pick]
        start = mig.place(H100, profile, layout)
        if start is not None:
            layout.append((profile.name, start))
    return layout


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(layouts(), st.lists(st.sampled_from(FAILING), max_size=3)),
                min_size=1, max_size=5))
def test_one_clean_reconcile_converges_to_the_last_layout(
        steps: list[tuple[list[mig.Instance], list[str]]]) -> None:
    api = FakeNvml("h100x1", host="p")
    api.nvmlInit()
    for layout, failures in steps:
        for fn in failures:
            api.mig_fail_next(fn, pynvml.NVML_ERROR_UNKNOWN)
        agent_mig.reconcile(api, 0, layout)
        api.__dict__.get("_mig_failures", {}).clear()
    final = agent_mig.reconcile(api, 0, steps[-1][0])
    assert not final.errors, final.errors
    assert sorted(i.key for i in final.instances) == sorted(steps[-1][0])
    assert all(i.compute_instance_id is not None for i in final.instances)
    slots = [s for i in final.instances for s in range(i.start, i.start + i.size)]
    assert len(slots) == len(set(slots))
