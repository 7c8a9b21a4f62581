"""The MIG placer (scheduler/migplace.py): table tests of its rules and a property test
over any sequence of orders and releases (issue 28)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import mig
from scheduler.migplace import (
    DYNAMIC,
    WHOLE,
    MigGpu,
    MigPick,
    MigRequest,
    MigWait,
    place_request,
    schedule,
    share_milli,
)

H100 = mig.CATALOGUE["H100"]
PLAIN = [p.name for p in H100.profiles if not p.media]


def gpus(n: int = 1, node: str = "n1", **kw: object) -> list[MigGpu]:
    return [MigGpu(node=node, index=i, model="H100", mode=DYNAMIC, **kw)  # type: ignore[arg-type]
            for i in range(n)]


def req(profile: str, count: int = 1, rid: str = "r") -> MigRequest:
    return MigRequest(id=rid, profile=profile, count=count, models=frozenset({"H100"}))


def test_seven_1g_fill_one_gpu_at_every_valid_start_and_an_eighth_waits() -> None:
    result = schedule(gpus(), [req("1g.10gb", rid=f"r{i}") for i in range(8)])
    starts = sorted(p.start for r in result.values() if not isinstance(r, MigWait) for p in r)
    assert starts == [0, 1, 2, 3, 4, 5, 6]
    assert result["r7"] is MigWait.NO_SLICES


def test_3g_after_one_at_zero_leaves_three_1g_not_four() -> None:
    layout = (("3g.40gb", 0),)
    result = schedule(gpus(layout=layout), [req("1g.10gb", rid=f"r{i}") for i in range(4)])
    assert [isinstance(r, MigWait) for r in result.values()] == [False, False, False, True]


@pytest.mark.parametrize(("layout", "profile", "placeable"), [
    ((), "7g.80gb", True),
    ((("1g.10gb", 6),), "7g.80gb", False),
    ((("1g.10gb", 1),), "4g.40gb", False),  # slot 0 free, but 4g needs 0..3
    ((("1g.10gb", 0), ("1g.10gb", 2), ("1g.10gb", 4), ("1g.10gb", 6)), "3g.40gb", False),
    ((("1g.10gb", 0), ("1g.10gb", 1), ("1g.10gb", 2), ("1g.10gb", 3)), "3g.40gb", True),
    ((("1g.10gb", 5),), "2g.20gb", True),
    ((("2g.20gb", 0), ("2g.20gb", 2), ("2g.20gb", 4)), "1g.10gb", True),  # 6 + 1 compute
    ((("2g.20gb", 0), ("2g.20gb", 2), ("2g.20gb", 4)), "1g.20gb", True),
    ((("3g.40gb", 0), ("2g.20gb", 4)), "1g.20gb", True),
    ((("3g.40gb", 0), ("3g.40gb", 4)), "1g.10gb", False),  # memory full
    ((("4g.40gb", 0),), "4g.40gb", False),  # only one start, and at most one
])
def test_what_looks_free_is_placeable_only_at_a_valid_start(
        layout: tuple[tuple[str, int], ...], profile: str, placeable: bool) -> None:
    result = place_request(gpus(layout=layout), req(profile))
    assert (not isinstance(result, MigWait)) is placeable
    if placeable:
        assert isinstance(result, tuple)
        assert mig.can_add(H100, H100.profile(profile), result[0].start, list(layout))


def test_never_on_a_gpu_used_whole_or_in_whole_mode_or_unhealthy() -> None:
    pool = [*gpus(1, plain=True), replace(gpus(1)[0], index=1, mode=WHOLE),
            replace(gpus(1)[0], index=2, healthy=False)]
    assert place_request(pool, req("1g.10gb")) is MigWait.NO_MIG_GPU
    assert place_request([*pool, replace(gpus(1)[0], index=3)], req("1g.10gb")) == (
        MigPick("n1", 3, "H100", "1g.10gb", 6),)


def test_a_gpu_in_use_is_filled_before_a_fresh_one_and_a_node_takes_all() -> None:
    pool = [*gpus(2, layout=()), ]
    pool[1] = replace(pool[1], layout=(("1g.10gb", 6),))
    (pick,) = place_request(pool, req("1g.10gb"))  # type: ignore[misc]
    assert pick.index == 1
    spread = [*gpus(1, node="a", layout=(("3g.40gb", 4),)), *gpus(1, node="b")]
    picks = place_request(spread, req("2g.20gb", count=3))
    assert isinstance(picks, tuple) and {p.node for p in picks} == {"b"}


def test_the_start_keeps_the_large_profiles_placeable() -> None:
    (pick,) = place_request(gpus(), req("3g.40gb"))  # type: ignore[misc]
    assert pick.start == 4  # slot 0 stays free for a 4g/3g
    (one,) = place_request(gpus(layout=(("3g.40gb", 4),)), req("1g.10gb"))  # type: ignore[misc]
    assert one.start == 3  # 0..2 still take a 2g.20gb at 0 and a 1g at 2


def test_shares_in_gpu_equivalents() -> None:
    assert {p: share_milli("H100", p) for p in PLAIN} == {
        "1g.10gb": 142, "1g.20gb": 250, "2g.20gb": 285, "3g.40gb": 500, "4g.40gb": 571,
        "7g.80gb": 1000}


STEP = st.one_of(
    st.tuples(st.just("order"), st.sampled_from(PLAIN), st.integers(1, 3)),
    st.tuples(st.just("whole"), st.integers(0, 2), st.just(0)),
    st.tuples(st.just("release"), st.integers(0, 30), st.just(0)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(STEP, max_size=40))
def test_no_sequence_overlaps_slices_or_mixes_mig_and_whole(
        steps: list[tuple[str, object, int]]) -> None:
    """Orders (MIG and whole GPUs) and releases in any order: every GPU's instances sit at
    valid starts on disjoint slices within the compute limit, and no GPU holds MIG
    instances and a whole-GPU lease at once."""
    pool = gpus(3) + gpus(1, node="n2")
    held: list[tuple[str, tuple[MigPick, ...] | int]] = []  # (kind, picks | gpu position)
    for n, (kind, what, count) in enumerate(steps):
        if kind == "order":
            result = place_request(pool, req(str(what), count, f"r{n}"))
            if isinstance(result, MigWait):
                assert not any(mig.free_starts(H100.profile(str(what)), mig.ranges(
                    H100, g.layout)) and mig.place(H100, str(what), g.layout) is not None
                    for g in pool if g.mode == DYNAMIC and not g.plain and count == 1)
                continue
            for p in result:
                i = next(i for i, g in enumerate(pool) if (g.node, g.index) == (p.node, p.index))
                pool[i] = replace(pool[i], layout=(*pool[i].layout, (p.profile, p.start)))
            held.append(("mig", result))
        elif kind == "whole":
            i = int(str(what))
            if not pool[i].layout and not pool[i].plain:  # the core's rule: the GPU free
                pool[i] = replace(pool[i], plain=True)
                held.append(("whole", i))
        elif held:
            gone_kind, gone = held.pop(int(str(what)) % len(held))
            if gone_kind == "whole":
                assert isinstance(gone, int)
                pool[gone] = replace(pool[gone], plain=False)
            else:
                assert isinstance(gone, tuple)
                for p in gone:
                    i = next(i for i, g in enumerate(pool)
                             if (g.node, g.index) == (p.node, p.index))
                    layout = list(pool[i].layout)
                    layout.remove((p.profile, p.start))
                    pool[i] = replace(pool[i], layout=tuple(layout))
        for g in pool:
            assert mig.layout_valid(H100, list(g.layout)), g.layout
            assert not (g.plain and g.layout), g


# --- spot preemption (ADR 0241) -------------------------------------------------------

def test_preempting_takes_the_fewest_spot_instances_and_never_a_paying_one() -> None:
    from scheduler.migplace import place_preempting

    full = tuple(("1g.10gb", s) for s in range(7))
    spot = (("a", ("1g.10gb", 1)), ("b", ("1g.10gb", 4)), ("c", ("1g.10gb", 5)),
            ("d", ("1g.10gb", 6)))
    (gpu,) = gpus(layout=full, spot=spot)
    assert isinstance(place_request([gpu], req("1g.10gb")), MigWait)
    picks, victims = place_preempting([gpu], req("1g.10gb")) or ((), frozenset())
    assert len(victims) == 1 and victims <= {"a", "b", "c", "d"}
    (pick,) = picks
    assert ("1g.10gb", pick.start) in {inst for _, inst in spot}
    # 3g.40gb fits at 4 (b, c, d give way); at 0 it would need paying instances 0, 2, 3
    picks, victims = place_preempting([gpu], req("3g.40gb")) or ((), frozenset())
    assert [p.start for p in picks] == [4] and victims == {"b", "c", "d"}
    assert place_preempting([gpu], req("7g.80gb")) is None  # paying ones stay


def test_a_spot_whole_use_makes_way_and_a_paying_one_does_not() -> None:
    from scheduler.migplace import place_preempting

    (spot_whole,) = gpus(plain=True, plain_spot=("w",))
    picks, victims = place_preempting([spot_whole], req("1g.10gb")) or ((), frozenset())
    assert victims == {"w"} and len(picks) == 1
    (paying,) = gpus(plain=True)
    assert place_preempting([paying], req("1g.10gb")) is None
