import pytest

from scheduler import (
    FairShareConfig,
    Placement,
    PriorityClass,
    Reason,
    TenantQuota,
    Unplaceable,
    UsageRecord,
    check_extension,
    quote,
    schedule_pass,
)
from scheduler.fairshare import decayed_usage

from .builders import lease, node, req, snap

ONE = (node("n1", gpus=8),)


def decide(s, *requests, now=0):
    return schedule_pass(s, list(requests), now=now).by_id()


def test_reason_no_matching_gpus():
    d = decide(snap(ONE), req("r", models=frozenset({"T4"})))["r"]
    assert isinstance(d, Unplaceable)
    assert d.reason == Reason.NO_MATCHING_GPUS


def test_reason_fragmentation_and_insufficient_capacity():
    nodes = (node("a", gpus=2), node("b", gpus=2))
    s = snap(nodes, leases=(lease("x", "a", [0]), lease("y", "b", [0])))
    assert decide(s, req("r", gpus=2))["r"].reason == Reason.FRAGMENTATION
    assert decide(s, req("r", gpus=2, nodes=2, locality=None))["r"].reason in (
        Reason.FRAGMENTATION, Reason.INSUFFICIENT_CAPACITY)
    full = snap(nodes, leases=(lease("x", "a", [0, 1]), lease("y", "b", [0])))
    assert decide(full, req("r", gpus=2))["r"].reason == Reason.INSUFFICIENT_CAPACITY


def test_reason_priority_when_earlier_requests_took_the_capacity():
    d = decide(snap(ONE), req("a", gpus=8, submitted_at=0), req("b", gpus=8, submitted_at=1))
    assert isinstance(d["a"], Placement)
    assert d["b"].reason == Reason.PRIORITY


def test_quota_and_budget():
    q = TenantQuota("t1", guaranteed={"H100": 2}, borrow_limit=1)
    s = snap(ONE, quotas={"t1": q})
    assert decide(s, req("r", gpus=4))["r"].reason == Reason.QUOTA
    p = decide(s, req("r", gpus=3))["r"]
    assert isinstance(p, Placement)
    assert p.borrowed
    assert not decide(s, req("r", gpus=2))["r"].borrowed
    b = TenantQuota("t1", gpu_hour_budget=10, gpu_hours_used=9)
    sb = snap(ONE, quotas={"t1": b})
    assert decide(sb, req("r", gpus=2, start=0, end=3600))["r"].reason == Reason.BUDGET
    assert isinstance(decide(sb, req("r", gpus=1, start=0, end=3600))["r"], Placement)


def test_backfill_uses_reserved_gpus_only_if_it_ends_before_the_reservation():
    resv = lease("resv", "n1", list(range(8)), start=1000, end=2000)
    s = snap(ONE, leases=(resv,))
    short = decide(s, req("short", gpus=8, start=0, end=1000))["short"]
    assert isinstance(short, Placement)
    long = decide(s, req("long", gpus=8, start=0, end=1001))["long"]
    assert long.reason == Reason.RESERVED
    assert long.earliest_start == 2000


def test_advance_reservation_holds_capacity_from_its_start():
    d = decide(snap(ONE), req("future", gpus=8, start=5000, end=6000),
               req("now", gpus=8, start=0, end=5001, priority=PriorityClass.SPOT))
    assert isinstance(d["future"], Placement)
    assert d["future"].start == 5000
    assert d["now"].reason == Reason.RESERVED


def test_earliest_start_from_the_calendar_and_quote():
    s = snap(ONE, leases=(lease("busy", "n1", list(range(6)), start=0, end=700),))
    q = quote(s, req("r", gpus=4, start=0, end=100), now=10)
    assert not q.placeable_now
    assert q.earliest_start == 700
    ok = quote(s, req("r", gpus=2, start=0, end=100), now=10)
    assert ok.placeable_now
    assert ok.placement is not None


def test_extension_checks_the_calendar():
    a = lease("a", "n1", [0, 1], start=0, end=100)
    b = lease("b", "n1", [0], start=300, end=400)
    s = snap(ONE, leases=(a, b))
    assert check_extension(s, "a", 250).ok
    res = check_extension(s, "a", 500)
    assert not res.ok
    assert res.longest_end == 300
    assert res.conflicts == ("b",)


def test_spot_is_preempted_with_victims_that_free_one_node():
    nodes = (node("a", gpus=4), node("b", gpus=4))
    spot = [lease(f"s{i}", n, [g], priority=PriorityClass.SPOT, start=i, tenant="t2")
            for i, (n, g) in enumerate([("a", 0), ("b", 0), ("b", 1), ("b", 2), ("b", 3),
                                        ("a", 1), ("a", 2), ("a", 3)])]
    s = snap(nodes, leases=tuple(spot))
    d = decide(s, req("r", gpus=1))["r"]
    assert isinstance(d, Placement)
    assert len(d.victims) == 1
    spot_req = decide(s, req("r", gpus=1, priority=PriorityClass.SPOT))["r"]
    assert isinstance(spot_req, Unplaceable)


def test_guarantee_reclaims_borrowed_capacity():
    quotas = {"g": TenantQuota("g", guaranteed={"H100": 8}),
              "b": TenantQuota("b", guaranteed={}, borrow_limit=8)}
    borrowed = lease("bl", "n1", list(range(8)), tenant="b", borrowed=True)
    s = snap(ONE, leases=(borrowed,), quotas=quotas)
    d = decide(s, req("r", tenant="g", gpus=8))["r"]
    assert isinstance(d, Placement)
    assert d.victims == ("bl",)


def test_fair_share_orders_tenants_by_decayed_usage_then_age():
    s = snap(ONE, usage=(UsageRecord("heavy", 1e6, 0),))
    res = schedule_pass(s, [req("h", tenant="heavy", gpus=8, submitted_at=0),
                            req("l", tenant="light", gpus=8, submitted_at=5)], now=0)
    assert isinstance(res.by_id()["l"], Placement)
    assert res.by_id()["h"].reason == Reason.PRIORITY


def test_decay_halves_usage_every_half_life_and_cannot_be_disabled():
    cfg = FairShareConfig(half_life_s=100)
    assert decayed_usage([UsageRecord("t", 8.0, 0)], 200, cfg)["t"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="half_life"):
        FairShareConfig(half_life_s=0)


def test_priority_class_goes_before_fair_share():
    res = schedule_pass(snap(ONE), [req("spot", gpus=8, priority=PriorityClass.SPOT),
                                    req("res", gpus=8, priority=PriorityClass.RESERVED,
                                        submitted_at=9)], now=0)
    assert res.decisions[0].request_id == "res"


def test_unhealthy_gpus_and_down_nodes_are_excluded():
    from scheduler import Gpu, Node, NodeState

    sick = Node("s", 64_000, 256_000, (Gpu(0, "H100", healthy=False), Gpu(1, "H100")))
    down = Node("d", 64_000, 256_000, (Gpu(0, "H100"), Gpu(1, "H100")), NodeState.DOWN)
    d = decide(snap((sick, down)), req("r", gpus=1), req("r2", gpus=1, submitted_at=1))
    assert d["r"].gpu_ids == (("s", 1),)
    assert isinstance(d["r2"], Unplaceable)


def test_request_validation():
    with pytest.raises(ValueError):
        req("bad", gpus=2, gpu_milli=500)
    with pytest.raises(ValueError):
        req("bad", start=10, end=10)
