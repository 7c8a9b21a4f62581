"""Fixed MIG layouts (ADR 0238): mig-parted's config format checked against the MIG tables,
packed deterministically at valid placements, and placed exactly as laid out."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler import migfixed, migplace
from scheduler.mig import CATALOGUE, layout_valid


def doc(*entries: dict[str, Any], name: str = "c") -> dict[str, Any]:
    return {"version": "v1", "mig-configs": {name: list(entries)}}


ALL_1G = {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}
H100x2 = {0: "H100", 1: "H100"}


@pytest.mark.parametrize(("document", "name", "field"), [
    ({"version": "v2", "mig-configs": {"c": [ALL_1G]}}, "c", "version"),
    ({"mig-configs": {"c": [ALL_1G]}}, "c", "version"),
    ("not a mapping", "c", "version"),
    ({"version": "v1"}, "c", "mig-configs"),
    ({"version": "v1", "mig-configs": []}, "c", "mig-configs"),
    (doc(ALL_1G), "nope", "name"),
    ({"version": "v1", "mig-configs": {"c": []}}, "c", "mig-configs.c"),
    (doc("x"), "c", "mig-configs.c[0]"),
    (doc({**ALL_1G, "mig-enabled": "yes"}), "c", "mig-configs.c[0].mig-enabled"),
    (doc({"devices": "all", "mig-devices": {}}), "c", "mig-configs.c[0].mig-enabled"),
    (doc({**ALL_1G, "devices": "some"}), "c", "mig-configs.c[0].devices"),
    (doc({**ALL_1G, "devices": 0}), "c", "mig-configs.c[0].devices"),
    (doc({**ALL_1G, "devices": []}), "c", "mig-configs.c[0].devices"),
    (doc({**ALL_1G, "devices": [0, -1]}), "c", "mig-configs.c[0].devices"),
    (doc({**ALL_1G, "devices": [True]}), "c", "mig-configs.c[0].devices"),
    (doc({**ALL_1G, "devices": [0, 2]}), "c", "mig-configs.c[0].devices"),  # out of range
    (doc(ALL_1G, {**ALL_1G, "devices": [9]}), "c", "mig-configs.c[1].devices"),
    (doc({**ALL_1G, "device-filter": ["0x233010DE"]}), "c",
     "mig-configs.c[0].device-filter"),
    (doc({**ALL_1G, "mig-devices": {"1g.5gb": 7}}), "c",  # an A100-40GB profile
     "mig-configs.c[0].mig-devices.1g.5gb"),
    (doc({**ALL_1G, "mig-devices": {"1g.10gb": "7"}}), "c",
     "mig-configs.c[0].mig-devices.1g.10gb"),
    (doc({**ALL_1G, "mig-devices": {"1g.10gb": -1}}), "c",
     "mig-configs.c[0].mig-devices.1g.10gb"),
    (doc({**ALL_1G, "mig-devices": ["1g.10gb"]}), "c", "mig-configs.c[0].mig-devices"),
    (doc({**ALL_1G, "mig-devices": {"1g.10gb": 8}}), "c",  # slot 7 is no 1g start
     "mig-configs.c[0].mig-devices"),
    (doc({**ALL_1G, "mig-devices": {"3g.40gb": 2, "1g.10gb": 1}}), "c",  # 7 compute +1
     "mig-configs.c[0].mig-devices"),
    (doc({**ALL_1G, "mig-devices": {"4g.40gb": 1, "3g.40gb": 1, "1g.10gb": 1}}), "c",
     "mig-configs.c[0].mig-devices"),
    (doc({**ALL_1G, "mig-devices": {"2g.20gb": 4}}), "c", "mig-configs.c[0].mig-devices"),
    (doc({**ALL_1G, "mig-devices": {"1g.10gb+me": 2}}), "c",  # one media instance per GPU
     "mig-configs.c[0].mig-devices"),
    (doc({"devices": "all", "mig-enabled": False, "mig-devices": {"1g.10gb": 1}}), "c",
     "mig-configs.c[0].mig-devices"),
])
def test_a_bad_file_names_its_field(document: Any, name: str, field: str) -> None:
    with pytest.raises(migfixed.LayoutError) as err:
        migfixed.layouts(migfixed.config(document, name), H100x2, f"mig-configs.{name}")
    assert err.value.field == field, str(err.value)


def test_a_gpu_without_mig_refuses_any_instance() -> None:
    with pytest.raises(migfixed.LayoutError) as err:
        migfixed.layouts(migfixed.config(doc(ALL_1G), "c"), {0: "L40S"})
    assert err.value.field == "mig-configs[0].mig-devices"


def test_nvidias_example_configs_are_accepted() -> None:
    document = {"version": "v1", "mig-configs": {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "all-enabled": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}],
        "custom": [{"devices": [0], "mig-enabled": False},
                   {"devices": [1], "mig-enabled": True,
                    "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}]}}
    off = migfixed.layouts(migfixed.config(document, "all-disabled"), H100x2)
    assert off == {0: migfixed.FixedLayout(False), 1: migfixed.FixedLayout(False)}
    empty = migfixed.layouts(migfixed.config(document, "all-enabled"), H100x2)
    assert empty == {0: migfixed.FixedLayout(True), 1: migfixed.FixedLayout(True)}
    custom = migfixed.layouts(migfixed.config(document, "custom"), H100x2)
    assert custom[0] == migfixed.FixedLayout(False)
    # 3g.40gb at 0 would leave 1g starts 4-6 only beside a 2g: it goes to 4
    assert custom[1].instances == (("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3),
                                   ("3g.40gb", 4))
    assert layout_valid(CATALOGUE["H100"], custom[1].instances)


def test_the_last_entry_naming_a_gpu_wins_and_unnamed_gpus_are_left_out() -> None:
    document = doc({"devices": "all", "mig-enabled": False},
                   {"devices": [1], "mig-enabled": True, "mig-devices": {"7g.80gb": 1}})
    out = migfixed.layouts(migfixed.config(document, "c"), {0: "H100", 1: "H100", 2: "H100"})
    assert out[0] == out[2] == migfixed.FixedLayout(False)
    assert out[1] == migfixed.FixedLayout(True, (("7g.80gb", 0),))
    only_one = migfixed.layouts(migfixed.config(doc({**ALL_1G, "devices": [1]}), "c"), H100x2)
    assert set(only_one) == {1}


def test_packing_searches_placements_a_greedy_fill_misses() -> None:
    """3g.40gb at slot 0 leaves three 1g.10gb starts (4, 5, 6); at slot 4, four (0-3)."""
    packed = migfixed.pack("H100", [("1g.10gb", 4), ("3g.40gb", 1)])
    assert packed == (("1g.10gb", 0), ("1g.10gb", 1), ("1g.10gb", 2), ("1g.10gb", 3),
                      ("3g.40gb", 4))
    assert packed == migfixed.pack("H100", [("3g.40gb", 1), ("1g.10gb", 4)])  # deterministic
    assert migfixed.pack("H100", [("1g.10gb", 7)]) == tuple(
        ("1g.10gb", s) for s in range(7))
    assert migfixed.pack("H200", [("3g.71gb", 2)]) == (("3g.71gb", 0), ("3g.71gb", 4))


def test_wire_round_trip() -> None:
    layout = migfixed.FixedLayout(True, (("2g.20gb", 0), ("2g.20gb", 2)))
    assert migfixed.from_wire(layout.as_wire()) == layout
    assert migfixed.from_wire({}) is None


FIXED = (("3g.40gb", 0), ("1g.10gb", 4), ("1g.10gb", 5), ("1g.10gb", 6))


def gpu(index: int = 0, **kw: Any) -> migplace.MigGpu:
    return migplace.MigGpu(node="n1", index=index, model="H100", **{
        "mode": migplace.FIXED, "fixed": FIXED, **kw})


def req(profile: str, count: int = 1, rid: str = "r") -> migplace.MigRequest:
    return migplace.MigRequest(id=rid, profile=profile, count=count,
                               models=frozenset({"H100"}))


def test_a_fixed_gpu_offers_exactly_its_layout() -> None:
    reqs = [req("1g.10gb", rid=f"s{i}") for i in range(4)] + [req("3g.40gb", rid="big")]
    out = migplace.schedule([gpu()], reqs)
    starts = [out[f"s{i}"] for i in range(3)]
    assert [p[0].start for p in starts if not isinstance(p, migplace.MigWait)] == [4, 5, 6]
    assert out["s3"] == migplace.MigWait.NO_SLICES  # a dynamic GPU would not have 3g yet
    big = out["big"]
    assert not isinstance(big, migplace.MigWait) and big[0].start == 0


def test_a_fixed_gpu_is_never_laid_out_otherwise() -> None:
    """A profile its layout lacks waits, though a dynamic GPU with the same instances held
    would take it; a 3g.40gb of the layout is not split into 1g.10gb when they run out."""
    held = (("1g.10gb", 4), ("1g.10gb", 5), ("1g.10gb", 6))
    assert migplace.place_request([gpu(layout=held)], req("2g.20gb")) \
        == migplace.MigWait.NO_SLICES
    assert migplace.place_request([gpu(layout=held)], req("1g.10gb")) \
        == migplace.MigWait.NO_SLICES
    dynamic = gpu(mode=migplace.DYNAMIC, fixed=(), layout=held)
    assert not isinstance(migplace.place_request([dynamic], req("2g.20gb")),
                          migplace.MigWait)


def test_a_fixed_gpu_with_mig_off_or_held_whole_offers_nothing() -> None:
    assert migplace.place_request([gpu(mode=migplace.WHOLE)], req("1g.10gb")) \
        == migplace.MigWait.NO_MIG_GPU
    assert migplace.place_request([gpu(plain=True)], req("1g.10gb")) \
        == migplace.MigWait.NO_MIG_GPU
