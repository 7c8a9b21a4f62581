"""A running spot lease gets a notice before it is preempted (GPUPOOL_PREEMPT_GRACE_S).

The on-demand order that needs its GPUs is placed to start when the notice ends; the spot
lease is told (event, e-mail, WebSocket), cannot be extended, and ends as preempted when the
notice runs out. With a grace of 0 the old behaviour holds: preempted at once.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core import mail

from portal.core import clock
from portal.leasing import services
from portal.leasing.models import Allocation, Lease, LeaseEvent, Quota
from portal.leasing.models import LeaseState as S
from portal.tenants.models import Role
from tests.portal.factories import add_member, make_tenant
from tests.portal.leasing.conftest import drive

GRACE = timedelta(seconds=120)


@pytest.fixture
def full(pool: dict[str, Any], settings: Any) -> dict[str, Any]:
    """The whole pool (4 × 8 GPUs) held by tenant c's four running spot leases."""
    settings.GPUPOOL_PREEMPT_GRACE_S = int(GRACE.total_seconds())
    c = make_tenant("c")
    Quota.objects.create(tenant=c, gpu_model="H100", max_gpus=32, guaranteed_gpus=0)
    carol = add_member(c, "carol", Role.MEMBER)
    spot = [_order(carol, c, priority="spot") for _ in range(4)]
    drive()
    assert {lease.state for lease in _fresh(spot)} == {S.ACTIVE}
    return {**pool, "c": c, "carol": carol, "spot": spot}


def _order(actor: Any, tenant: Any, **kw: Any) -> Lease:
    spec = services.OrderSpec(**{"models": ["H100"], "gpu_count": 8,
                                 "duration_hours": Decimal(4), **kw})
    return services.order_create(actor=actor, tenant=tenant, spec=spec)


def _fresh(leases: list[Lease]) -> list[Lease]:
    return list(Lease.objects.filter(pk__in=[x.pk for x in leases]).order_by("created"))


def _overlaps() -> list[str]:
    """Live allocations sharing a GPU slot at overlapping times (what PostgreSQL's exclusion
    constraint forbids; checked here by hand so SQLite runs prove it too)."""
    by_slot: dict[tuple[int, int], list[Allocation]] = defaultdict(list)
    for a in Allocation.objects.filter(live=True):
        by_slot[(a.gpu_id, a.slot)].append(a)
    bad = []
    for rows in by_slot.values():
        rows.sort(key=lambda a: a.start_at)
        bad += [f"{x.lease_id}/{y.lease_id}" for x, y in zip(rows, rows[1:], strict=False)
                if y.start_at < x.end_at]
    return bad


def test_running_spot_lease_gets_a_notice_then_is_preempted(full: dict[str, Any]) -> None:
    now = clock.now()
    mine = _order(full["alice"], full["a"])
    drive()
    mine.refresh_from_db()
    assert mine.state == S.SCHEDULED and mine.start_at == now + GRACE
    assert mine.end_at == now + GRACE + timedelta(hours=4)  # the full duration it asked for
    noticed = [x for x in _fresh(full["spot"]) if x.release_kind == S.PREEMPTED]
    assert len(noticed) == 1
    victim = noticed[0]
    assert victim.state == S.NOTICE and victim.end_at == now + GRACE  # a visible state
    assert LeaseEvent.objects.filter(lease=victim, from_state=S.ACTIVE,
                                     to_state=S.NOTICE).count() == 1
    assert any("will be preempted" in m.subject for m in mail.outbox)
    assert set(Allocation.objects.filter(lease=victim, live=True)
               .values_list("end_at", flat=True)) == {now + GRACE}
    assert _overlaps() == []

    with pytest.raises(services.ExtensionRefused):
        services.lease_extend(actor=full["carol"], lease=victim,
                              end_at=victim.end_at + timedelta(hours=1))
    drive()  # nothing changes before the notice runs out; no "ends in 60 minutes" mail
    victim.refresh_from_db()
    assert victim.state == S.NOTICE
    assert not any("ends in" in m.subject and str(victim.pk) in m.body for m in mail.outbox)

    clock.advance(GRACE)
    drive()
    victim.refresh_from_db()
    mine.refresh_from_db()
    assert victim.state == S.PREEMPTED
    assert mine.state == S.ACTIVE
    others = [x for x in _fresh(full["spot"]) if x.pk != victim.pk]
    assert {x.state for x in others} == {S.ACTIVE}
    assert _overlaps() == []


def test_second_preemptor_does_not_extend_a_notice(full: dict[str, Any]) -> None:
    now = clock.now()
    first = _order(full["alice"], full["a"])
    drive()
    clock.advance(timedelta(seconds=30))
    second = _order(full["alice"], full["a"])
    drive()
    spot = _fresh(full["spot"])
    ends = sorted(x.end_at for x in spot if x.release_kind == S.PREEMPTED)
    assert ends == [now + GRACE, now + timedelta(seconds=30) + GRACE]
    assert _overlaps() == []
    clock.advance(GRACE)
    drive()
    assert {x.state for x in _fresh([first, second])} == {S.ACTIVE}
    assert sorted(x.state for x in _fresh(full["spot"])) == [S.ACTIVE, S.ACTIVE,
                                                            S.PREEMPTED, S.PREEMPTED]


def test_no_grace_preempts_at_once(full: dict[str, Any], settings: Any) -> None:
    settings.GPUPOOL_PREEMPT_GRACE_S = 0
    mine = _order(full["alice"], full["a"])
    drive()
    mine.refresh_from_db()
    assert mine.state == S.ACTIVE and mine.start_at == clock.now()
    assert sorted(x.state for x in _fresh(full["spot"])).count(S.PREEMPTED) == 1
    assert _overlaps() == []


@pytest.mark.parametrize(("language", "banner"),
                         [("en", "This spot lease is being preempted"),
                          ("zh-hans", "此竞价租约即将被抢占")])
def test_lease_page_shows_the_notice_and_no_extend(full: dict[str, Any], language: str,
                                                   banner: str) -> None:
    from django.test import Client
    from django.urls import reverse
    from django.utils import translation

    _order(full["alice"], full["a"])
    drive()
    victim = next(x for x in _fresh(full["spot"]) if x.release_kind == S.PREEMPTED)
    client = Client(HTTP_ACCEPT_LANGUAGE=language)
    client.force_login(full["carol"])
    try:
        page = client.get(reverse("web:lease", kwargs={"lease_id": victim.pk}))
    finally:
        translation.activate("en")
    html = page.content.decode()
    assert page.status_code == 200
    assert 'id="preemption-notice"' in html and banner in html
    assert reverse("web:lease_extend", kwargs={"lease_id": victim.pk}) not in html
    other = next(x for x in _fresh(full["spot"]) if x.release_kind != S.PREEMPTED)
    assert 'id="preemption-notice"' not in client.get(
        reverse("web:lease", kwargs={"lease_id": other.pk})).content.decode()


def test_a_notice_is_a_state_that_still_grants_is_counted_and_billed(
        full: dict[str, Any]) -> None:
    """Issue 12: the notice is a state of the table (ACTIVE → NOTICE → RELEASING), not a
    hidden ``release_kind`` on an ACTIVE lease; under it the lease keeps its access, its
    place against the quota and its billing, and the API lists it by that state."""
    from portal.billing.metering import meter_leases
    from portal.billing.models import UsageRecord
    from portal.leasing import desired, states
    from portal.leasing.quotas import gpus_held
    from tests.portal.factories import client_for

    _order(full["alice"], full["a"])
    drive()
    victim = next(x for x in _fresh(full["spot"]) if x.state == S.NOTICE)
    assert S.NOTICE in states.ALLOWED[S.ACTIVE] and states.ALLOWED[S.NOTICE] == {S.RELEASING}
    node = desired.lease_nodes(victim)[0]
    grants = {g["lease_id"] for g in desired.derive_node(node)["access_grants"]}
    assert f"ls_{victim.pk.hex[:16]}" in grants  # still granted
    now = clock.now()
    assert gpus_held(full["c"], "H100", now, now + timedelta(seconds=1)) == 32
    clock.advance(timedelta(seconds=60))
    meter_leases(until=clock.now())
    assert UsageRecord.objects.filter(lease=victim, seconds__gt=0).exists()  # billed
    listed = client_for(full["carol"]).get("/api/v1/leases", {"state": "notice"}).json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert [row["id"] for row in rows] == [str(victim.pk)]
    assert rows[0]["state"] == "notice"


@pytest.mark.parametrize(("language", "label"), [("en", "Preemption notice"),
                                                 ("zh-hans", "抢占通知")])
def test_the_notice_state_has_its_label_on_the_pages(full: dict[str, Any], language: str,
                                                     label: str) -> None:
    from django.test import Client
    from django.urls import reverse
    from django.utils import translation

    _order(full["alice"], full["a"])
    drive()
    client = Client(HTTP_ACCEPT_LANGUAGE=language)
    client.force_login(full["carol"])
    try:
        html = client.get(reverse("web:leases")).content.decode()
    finally:
        translation.activate("en")
    assert 'data-state="notice"' in html and label in html


def test_the_migration_makes_a_hidden_notice_visible(full: dict[str, Any]) -> None:
    """Leases under a notice before migration 0004 were ACTIVE with release_kind set."""
    import importlib

    from django.apps import apps

    migration = importlib.import_module("portal.leasing.migrations.0004_lifecycle_notice_state")
    lease = _fresh(full["spot"])[0]
    Lease.objects.filter(pk=lease.pk).update(state=S.ACTIVE, release_kind=S.PREEMPTED)
    migration.notices_visible(apps, None)
    assert Lease.objects.get(pk=lease.pk).state == S.NOTICE
    others = Lease.objects.exclude(pk=lease.pk).values_list("state", flat=True)
    assert set(others) == {S.ACTIVE}
    migration.notices_hidden(apps, None)
    assert Lease.objects.get(pk=lease.pk).state == S.ACTIVE
