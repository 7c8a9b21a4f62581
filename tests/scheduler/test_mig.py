"""The MIG catalogue and placement rules (scheduler/mig.py), checked against NVIDIA's MIG
user guide ("Supported MIG Profiles"; ``nvidia-smi mig -lgipp``), not against the code."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import mig

# The guide's tables, typed in by hand: model -> profile -> (profile id, compute slices,
# memory slices, valid starts, max instances).
GUIDE = {
    "H100": {
        "1g.10gb": (19, 1, 1, {0, 1, 2, 3, 4, 5, 6}, 7),
        "1g.10gb+me": (20, 1, 1, {0, 1, 2, 3, 4, 5, 6}, 1),
        "1g.20gb": (15, 1, 2, {0, 2, 4, 6}, 4),
        "2g.20gb": (14, 2, 2, {0, 2, 4}, 3),
        "3g.40gb": (9, 3, 4, {0, 4}, 2),
        "4g.40gb": (5, 4, 4, {0}, 1),
        "7g.80gb": (0, 7, 8, {0}, 1),
    },
    "A100-40GB": {
        "1g.5gb": (19, 1, 1, {0, 1, 2, 3, 4, 5, 6}, 7),
        "1g.5gb+me": (20, 1, 1, {0, 1, 2, 3, 4, 5, 6}, 1),
        "1g.10gb": (15, 1, 2, {0, 2, 4, 6}, 4),
        "2g.10gb": (14, 2, 2, {0, 2, 4}, 3),
        "3g.20gb": (9, 3, 4, {0, 4}, 2),
        "4g.20gb": (5, 4, 4, {0}, 1),
        "7g.40gb": (0, 7, 8, {0}, 1),
    },
    "A100": {
        "1g.10gb": (19, 1, 1, {0, 1, 2, 3, 4, 5, 6}, 7),
        "1g.10gb+me": (20, 1, 1, {0, 1, 2, 3, 4, 5, 6}, 1),
        "1g.20gb": (15, 1, 2, {0, 2, 4, 6}, 4),
        "2g.20gb": (14, 2, 2, {0, 2, 4}, 3),
        "3g.40gb": (9, 3, 4, {0, 4}, 2),
        "4g.40gb": (5, 4, 4, {0}, 1),
        "7g.80gb": (0, 7, 8, {0}, 1),
    },
    "H200": {
        "1g.18gb": (19, 1, 1, {0, 1, 2, 3, 4, 5, 6}, 7),
        "1g.18gb+me": (20, 1, 1, {0, 1, 2, 3, 4, 5, 6}, 1),
        "1g.35gb": (15, 1, 2, {0, 2, 4, 6}, 4),
        "2g.35gb": (14, 2, 2, {0, 2, 4}, 3),
        "3g.71gb": (9, 3, 4, {0, 4}, 2),
        "4g.71gb": (5, 4, 4, {0}, 1),
        "7g.141gb": (0, 7, 8, {0}, 1),
    },
}
CELLS = [(model, name, start) for model, table in GUIDE.items() for name in table
         for start in range(mig.MEMORY_SLICES)]
H100 = mig.CATALOGUE["H100"]


def test_the_catalogue_is_the_guide() -> None:
    assert set(mig.CATALOGUE) == set(GUIDE)
    for model, table in GUIDE.items():
        got = {p.name: (p.profile_id, p.compute_slices, p.memory_slices, set(p.starts),
                        p.max_instances) for p in mig.CATALOGUE[model].profiles}
        assert got == table, model


@pytest.mark.parametrize(("model", "name", "start"), CELLS)
def test_every_profile_at_every_start_slot_of_an_empty_gpu(model: str, name: str,
                                                          start: int) -> None:
    m = mig.CATALOGUE[model]
    placeable = start in GUIDE[model][name][3]
    assert mig.can_add(m, m.profile(name), start, []) is placeable
    assert mig.layout_valid(m, [(name, start)]) is placeable


@pytest.mark.parametrize(("layout", "name", "start"), [
    ([], "3g.40gb", 2),  # slots 2-5 are free, but 3g starts only at 0 or 4
    ([], "1g.10gb", 7),  # slot 7 is free, but no 1g.10gb starts there
    ([], "2g.20gb", 6),  # 6-7 free; 2g starts at 0, 2, 4
    ([], "4g.40gb", 4),  # 4-7 free; 4g only at 0
    ([("3g.40gb", 0)], "1g.10gb", 7),  # the fourth 1g.10gb that "fits" after a 3g at 0
    ([("1g.10gb", 0)], "4g.40gb", 4),
    ([("1g.10gb", 5)], "3g.40gb", 1),
    ([("2g.20gb", 0), ("2g.20gb", 2), ("2g.20gb", 4)], "1g.10gb", 7),
    ([("1g.10gb+me", 0)], "1g.10gb+me", 3),  # one +me at a time
])
def test_looks_free_but_is_not_placeable(layout: list[mig.Instance], name: str,
                                         start: int) -> None:
    used = mig.ranges(H100, layout)
    profile = H100.profile(name)
    assert not mig._mask(used) & (((1 << profile.size) - 1) << start) or start + profile.size > 8
    assert not mig.can_add(H100, profile, start, layout)
    assert start not in mig.free_starts(profile, used) or name.endswith("+me")


def test_a_3g_at_slot_0_leaves_room_for_three_1g_not_four() -> None:
    used = [(0, 4)]
    assert mig.free_starts(H100.profile("1g.10gb"), used) == (4, 5, 6)
    layout: list[mig.Instance] = [("3g.40gb", 0)]
    while (start := mig.place(H100, "1g.10gb", layout)) is not None:
        layout.append(("1g.10gb", start))
    assert sorted(s for n, s in layout if n == "1g.10gb") == [4, 5, 6]
    assert mig.layout_valid(H100, layout)


def test_a_3g_at_slot_4_leaves_room_for_four_1g() -> None:
    assert mig.free_starts(H100.profile("1g.10gb"), [(4, 4)]) == (0, 1, 2, 3)


@pytest.mark.parametrize(("layout", "valid"), [
    ([("7g.80gb", 0)], True),
    ([("4g.40gb", 0), ("3g.40gb", 4)], True),
    ([("3g.40gb", 0), ("3g.40gb", 4)], True),
    ([("2g.20gb", 0), ("2g.20gb", 2), ("2g.20gb", 4), ("1g.10gb", 6)], True),
    ([("1g.20gb", 0), ("1g.20gb", 2), ("1g.20gb", 4), ("1g.20gb", 6)], True),
    ([("1g.10gb", i) for i in range(7)], True),
    ([("7g.80gb", 0), ("1g.10gb", 6)], False),
    ([("4g.40gb", 0), ("2g.20gb", 2)], False),
    ([("3g.40gb", 4), ("1g.20gb", 6)], False),
    ([("1g.10gb+me", 0), ("1g.10gb+me", 1)], False),
    ([("5g.50gb", 0)], False),
])
def test_layout_valid(layout: list[mig.Instance], valid: bool) -> None:
    assert mig.layout_valid(H100, layout) is valid


def test_models_are_found_by_inventory_or_nvml_name() -> None:
    assert mig.model_for("H100") is H100
    assert mig.model_for("NVIDIA H100 80GB HBM3") is H100
    assert mig.model_for("NVIDIA A100-SXM4-40GB") is mig.CATALOGUE["A100-40GB"]
    assert mig.model_for("NVIDIA L40S") is None


# --- fragmentation ------------------------------------------------------------------------

def test_an_empty_or_full_gpu_scores_what_no_profile_could_ever_use() -> None:
    assert mig.frag_score(H100, [(0, 8)]) == 0.0
    assert mig.profile_fragment(H100.profile("7g.80gb"), []) == 0
    assert mig.profile_fragment(H100.profile("1g.10gb"), []) == 1  # slot 7


def test_the_score_prefers_layouts_that_keep_large_profiles_placeable() -> None:
    # same free slices (6), but 1g at 6 and 7 (1g.20gb at 6) keeps 4g and 3g at 0 placeable
    kept = mig.frag_score(H100, [(6, 2)])
    split = mig.frag_score(H100, [(2, 2)])
    assert kept < split
    assert mig.profile_fragment(H100.profile("4g.40gb"), [(2, 2)]) == 6  # fits nowhere
    assert mig.profile_fragment(H100.profile("4g.40gb"), [(6, 2)]) == 2  # 4-5 stranded


def test_score_grows_as_a_large_profile_loses_its_last_placement() -> None:
    scores = [mig.frag_score(H100, used) for used in ([], [(6, 1)], [(6, 1), (0, 1)])]
    assert scores[0] < scores[1] < scores[2]


def test_weights_follow_the_demand() -> None:
    used = [(2, 2)]
    only_small = mig.frag_score(H100, used, {"1g.10gb": 1.0})
    only_large = mig.frag_score(H100, used, {"4g.40gb": 1.0})
    assert only_small == 1.0 and only_large == 6.0
    assert mig.frag_score(H100, used, {}) == 0.0


def test_place_picks_the_least_harmful_start() -> None:
    assert mig.place(H100, "1g.10gb", []) == 6  # not 0: 4g and 3g stay placeable at 0
    assert mig.place(H100, "2g.20gb", []) == 4
    assert mig.place(H100, "3g.40gb", [("1g.10gb", 6)]) == 0
    assert mig.place(H100, "7g.80gb", [("1g.10gb", 6)]) is None
    assert mig.place(H100, "1g.10gb+me", [("1g.10gb+me", 6)]) is None


# --- property: no sequence of places/releases overlaps or leaves the valid starts ------------

OPS = st.lists(st.tuples(st.sampled_from(sorted(mig.CATALOGUE)), st.booleans(),
                         st.integers(0, 6), st.integers(0, 10)), max_size=40)


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_places_and_releases_never_overlap(ops: list[tuple[str, bool, int, int]]) -> None:
    layouts: dict[str, list[mig.Instance]] = {name: [] for name in mig.CATALOGUE}
    for model_name, release, pick, victim in ops:
        model, layout = mig.CATALOGUE[model_name], layouts[model_name]
        if release and layout:
            layout.pop(victim % len(layout))
            continue
        profile = model.profiles[pick]
        start = mig.place(model, profile, layout)
        if start is None:
            assert all(not mig.can_add(model, profile, s, layout) for s in range(8))
            continue
        assert start in profile.starts
        layout.append((profile.name, start))
        assert mig.layout_valid(model, layout)
        covered = [s for n, st_ in layout for s in range(st_, st_ + model.profile(n).size)]
        assert len(covered) == len(set(covered)) and max(covered) < mig.MEMORY_SLICES
