"""Issue 28 on the portal: MIG instances ordered, placed at valid starts, shared across
tenants, reported with their MIG-… UUIDs, released, and never mixed with whole GPUs."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from portal.core.errors import ApplicationError
from portal.inventory.generator import ClusterSpec, cluster_generate
from portal.inventory.models import Gpu, MigMode, Node
from portal.leasing import services
from portal.leasing.models import Allocation, Lease, MigInstance
from portal.leasing.models import LeaseState as S
from portal.leasing.selectors import cuda_visible_devices, mig_devices
from portal.tenants.models import Role
from portal.web.waits import lease_wait
from tests.portal.factories import add_member, client_for, make_tenant
from tests.portal.leasing.conftest import drive

H100_1G = {0, 1, 2, 3, 4, 5, 6}


@pytest.fixture
def mig_pool(db: Any, frozen_clock: Any) -> dict[str, Any]:
    """One H100 node × 8 GPUs, whole-GPU mode; only GPU 0 offered for MIG (dynamic)."""
    cluster_generate(actor=None, spec=ClusterSpec(nodes=1, gpus_per_node=8, nodes_per_leaf=1,
                                                  spines=1, model="H100"))
    node = Node.objects.get()
    Gpu.objects.filter(node=node, index=0).update(mig_mode=MigMode.DYNAMIC)
    people = {}
    for n in range(9):
        tenant = make_tenant(f"t{n}")
        people[n] = add_member(tenant, f"u{n}", Role.MEMBER)
        people[f"t{n}"] = tenant
    return people


def order(pool: dict[str, Any], n: int, profile: str = "1g.10gb", **kw: Any) -> Lease:
    spec = services.OrderSpec(**{"models": ["H100"], "mig_profile": profile, "gpu_count": 1,
                                 "duration_hours": Decimal(2), **kw})
    return services.order_create(actor=pool[n], tenant=pool[f"t{n}"], spec=spec)


def layout(gpu_index: int = 0) -> list[tuple[int, int]]:
    """(start, size) of the live instances on the GPU."""
    return sorted(MigInstance.objects.filter(gpu__index=gpu_index, allocation__live=True)
                  .values_list("start", "size"))


def test_seven_tenants_share_one_h100_and_an_eighth_waits(mig_pool: dict[str, Any]) -> None:
    leases = [order(mig_pool, n) for n in range(7)]
    drive()
    uuids = set()
    for lease in leases:
        lease.refresh_from_db()
        assert lease.state == S.ACTIVE, lease.state
        devices = mig_devices(lease)
        assert len(devices) == 1 and devices[0]["gpu_index"] == 0
        assert devices[0]["uuid"].startswith("MIG-")
        assert cuda_visible_devices(devices) == devices[0]["uuid"]
        uuids.add(devices[0]["uuid"])
        assert lease.total_gpus == pytest.approx(0.142)  # 1/7 of a GPU (ADR 0222)
    assert len(uuids) == 7
    assert {start for start, _ in layout()} == H100_1G  # every valid 1g start, never 7
    eighth = order(mig_pool, 7)
    drive()
    eighth.refresh_from_db()
    assert eighth.state == S.QUEUED and eighth.wait_reason == "mig_full"
    assert "no free slices at a valid placement" in lease_wait(eighth)
    # No whole-GPU work lands on the MIG GPU: an 8-GPU order waits (GPU 0 is not offered).
    whole = services.order_create(actor=mig_pool[8], tenant=mig_pool["t8"], spec=services.
                                  OrderSpec(models=["H100"], gpu_count=8,
                                            duration_hours=Decimal(1)))
    drive()
    whole.refresh_from_db()
    assert whole.state == S.QUEUED
    seven = services.order_create(actor=mig_pool[8], tenant=mig_pool["t8"], spec=services.
                                  OrderSpec(models=["H100"], gpu_count=7,
                                            duration_hours=Decimal(1)))
    drive()
    seven.refresh_from_db()
    assert seven.state == S.ACTIVE
    assert 0 not in set(Allocation.objects.filter(lease=seven).values_list("gpu__index",
                                                                           flat=True))


def test_after_four_release_a_3g_is_placed_at_a_valid_slot(mig_pool: dict[str, Any]) -> None:
    leases = [order(mig_pool, n) for n in range(7)]
    drive()
    by_start = {MigInstance.objects.get(lease=lease).start: lease for lease in leases}
    for start in (0, 1, 2, 3):  # frees the 3g.40gb placement at slot 0
        services.lease_release(actor=mig_pool[leases.index(by_start[start])],
                               lease=by_start[start])
    drive()
    big = order(mig_pool, 7, "3g.40gb")
    drive()
    big.refresh_from_db()
    assert big.state == S.ACTIVE
    inst = MigInstance.objects.get(lease=big)
    assert (inst.profile, inst.start, inst.size) == ("3g.40gb", 0, 4)
    assert layout() == [(0, 4), (4, 1), (5, 1), (6, 1)]
    assert big.total_gpus == 0.5


def test_a_3g_waits_while_no_valid_placement_is_free(mig_pool: dict[str, Any]) -> None:
    """Four slices free but not at a 3g.40gb placement: it waits; once there is one, it goes."""
    leases = [order(mig_pool, n) for n in range(7)]
    drive()
    by_start = {MigInstance.objects.get(lease=lease).start: lease for lease in leases}
    for start in (0, 2, 4, 6):  # slices 0, 2, 4, 6 and 7 free: no 4-slice run at 0 or 4
        services.lease_release(actor=mig_pool[leases.index(by_start[start])],
                               lease=by_start[start])
    drive()
    big = order(mig_pool, 7, "3g.40gb")
    drive()
    big.refresh_from_db()
    assert big.state == S.QUEUED and big.wait_reason == "mig_full"
    services.lease_release(actor=mig_pool[leases.index(by_start[5])], lease=by_start[5])
    drive()
    big.refresh_from_db()
    assert big.state == S.ACTIVE and MigInstance.objects.get(lease=big).start == 4


def test_instances_of_one_order_stay_on_one_node(mig_pool: dict[str, Any]) -> None:
    lease = order(mig_pool, 0, gpu_count=3)
    drive()
    lease.refresh_from_db()
    assert lease.state == S.ACTIVE
    devices = mig_devices(lease)
    assert len(devices) == 3 and len({d["node"] for d in devices}) == 1
    assert cuda_visible_devices(devices) == ",".join(d["uuid"] for d in devices)


@pytest.mark.parametrize(("kw", "field"), [
    ({"mig_profile": "9g.99gb"}, "mig_profile"),
    ({"mig_profile": "1g.18gb"}, "mig_profile"),  # an H200 profile, ordered on H100
    ({"gpu_milli": 500}, "gpu_milli"),
    ({"nodes": 2}, "nodes"),
    ({"gpu_count": 10_000}, "gpu_count"),
])
def test_bad_mig_orders_name_the_field(mig_pool: dict[str, Any], kw: dict[str, Any],
                                       field: str) -> None:
    with pytest.raises(ApplicationError) as err:
        order(mig_pool, 0, **kw)
    assert field in err.value.fields


def test_no_mig_gpu_offered_is_refused_naming_the_profile(mig_pool: dict[str, Any]) -> None:
    Gpu.objects.update(mig_mode="")
    with pytest.raises(ApplicationError) as err:
        order(mig_pool, 0)
    assert "mig_profile" in err.value.fields


def test_mig_never_goes_on_a_gpu_used_whole(mig_pool: dict[str, Any]) -> None:
    Gpu.objects.update(mig_mode=MigMode.DYNAMIC)
    whole = services.order_create(actor=mig_pool[8], tenant=mig_pool["t8"], spec=services.
                                  OrderSpec(models=["H100"], gpu_count=8,
                                            duration_hours=Decimal(1)))
    drive()
    whole.refresh_from_db()
    assert whole.state == S.ACTIVE
    lease = order(mig_pool, 0)
    drive()
    lease.refresh_from_db()
    assert lease.state == S.QUEUED and lease.wait_reason == "mig_none"


def test_the_api_orders_mig_and_shows_devices_and_cuda_visible_devices(
        mig_pool: dict[str, Any]) -> None:
    client = client_for(mig_pool[0])
    quote = client.post(reverse("order-quote"), {"models": ["H100"], "mig_profile": "3g.40gb",
                                                 "duration_hours": 2}, format="json")
    assert quote.status_code == 200, quote.content
    answer = quote.json()
    assert answer["placeable_now"] is True and answer["model"] == "H100"
    # half a GPU (3 of 7 compute, 4 of 8 memory slices) for two hours
    assert Decimal(answer["price"]) == Decimal(answer["unit_price"]) * Decimal("0.5") * 2
    response = client.post(reverse("order-create"), {"models": ["H100"],
                                                     "mig_profile": "1g.10gb", "gpu_count": 2,
                                                     "duration_hours": 2}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["mig_profile"] == "1g.10gb" and body["gpu_milli"] == 142
    assert body["devices"] == [] and body["cuda_visible_devices"] is None
    drive()
    detail = client.get(reverse("lease-detail", kwargs={"pk": body["id"]})).json()
    assert detail["state"] == "active" and len(detail["devices"]) == 2
    uuids = [d["uuid"] for d in detail["devices"]]
    assert all(u.startswith("MIG-") for u in uuids)
    assert detail["cuda_visible_devices"] == ",".join(uuids)
    assert {d["gpu_index"] for d in detail["devices"]} == {0}
    web = Client()
    web.force_login(mig_pool[0])
    page = web.get(reverse("web:lease", kwargs={"lease_id": body["id"]})).content.decode()
    assert all(u in page for u in uuids)
    assert f"export CUDA_VISIBLE_DEVICES={','.join(uuids)}" in page


@pytest.mark.parametrize(("body", "field"), [
    ({"mig_profile": "1g.10gb", "gpu_milli": 250}, "gpu_milli"),
    ({"mig_profile": "banana"}, "mig_profile"),
    ({"mig_profile": 7}, "mig_profile"),
    ({"mig_profile": "x" * 40}, "mig_profile"),
    ({"mig_profile": "1g.10gb", "nodes": 2}, "nodes"),
    ({"mig_profile": "1g.10gb", "models": ["H200"]}, "mig_profile"),
])
def test_the_api_refuses_bad_mig_orders_naming_the_field(mig_pool: dict[str, Any],
                                                         body: dict[str, Any],
                                                         field: str) -> None:
    for route in ("order-create", "order-quote"):
        response = client_for(mig_pool[0]).post(
            reverse(route), {"models": ["H100"], "duration_hours": 2, **body}, format="json")
        assert response.status_code == 400, response.content
        assert field in response.json()["fields"], response.json()
    assert not Lease.objects.exists()


def test_a_waiting_mig_order_has_a_queue_place_and_a_running_one_extends(
        mig_pool: dict[str, Any]) -> None:
    leases = [order(mig_pool, n, gpu_count=1 if n else 3) for n in range(5)]  # 3 + 4 = 7
    drive()
    waiting = order(mig_pool, 6, gpu_count=2)  # the GPU is full
    drive()
    response = client_for(mig_pool[6]).get(reverse("lease-detail", kwargs={"pk": waiting.pk}))
    assert response.status_code == 200 and response.json()["queue_position"] == 1
    first = leases[0]
    first.refresh_from_db()
    services.lease_extend(actor=mig_pool[0], lease=first,
                          end_at=first.end_at + timedelta(hours=3))
    first.refresh_from_db()
    assert first.end_at == first.start_at + timedelta(hours=5)


@pytest.mark.services("postgres")
def test_the_database_refuses_mig_slices_beside_a_fraction(mig_pool: dict[str, Any]) -> None:
    """The backstop (migration 0010): even a writer that skipped every check cannot put a
    MIG slice and a time-sliced fraction's slot on one GPU at the same time."""
    from django.db import IntegrityError, transaction

    from portal.core import clock

    lease = order(mig_pool, 0)
    drive()
    mine = Allocation.objects.get(lease=lease)
    now = clock.now()
    other = Lease.objects.create(tenant=mig_pool["t1"], allowed_models=["H100"], gpu_milli=125,
                                 start_at=now, end_at=now + timedelta(hours=1))
    free = next(s for s in range(8) if s != mine.slot)
    with pytest.raises(IntegrityError), transaction.atomic():
        Allocation.objects.create(lease=other, gpu=mine.gpu, node=mine.node, slot=free,
                                  start_at=now, end_at=now + timedelta(hours=1))
    later = mine.end_at + timedelta(minutes=1)  # after the instance: allowed
    Allocation.objects.create(lease=other, gpu=mine.gpu, node=mine.node, slot=free,
                              start_at=later, end_at=later + timedelta(hours=1))


def test_the_order_page_offers_profiles_with_live_availability(
        mig_pool: dict[str, Any]) -> None:
    from portal.leasing.selectors import mig_offer

    offer = {o["profile"]: o["free_now"] for o in mig_offer(models=["H100"])}
    assert offer == {"1g.10gb": 7, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1,
                     "7g.80gb": 1}
    order(mig_pool, 0, "3g.40gb")
    drive()
    offer = {o["profile"]: o["free_now"] for o in mig_offer(models=["H100"])}
    assert offer["7g.80gb"] == 0 and offer["3g.40gb"] == 1 and offer["1g.10gb"] == 4
    web = Client()
    web.force_login(mig_pool[1])
    page = web.get(reverse("web:order")).content.decode()
    assert "1g.10gb (4 free now)" in page and "7g.80gb (0 free now)" in page
    response = web.post(reverse("web:order"), {
        "models": ["H100"], "gpu_count": 2, "gpu_milli": 1000, "mig_profile": "1g.10gb",
        "nodes": 1, "locality": "any", "priority": "on_demand", "start": "now",
        "duration_hours": "2", "idempotency_key": "k1"})
    assert response.status_code == 302, response.content.decode()[:2000]
    lease = Lease.objects.get(tenant=mig_pool["t1"])
    assert lease.mig_profile == "1g.10gb" and lease.gpu_count == 2


def test_the_mig_strings_are_in_chinese() -> None:
    from django.utils import translation

    from portal.web.waits import sentence

    with translation.override("zh-hans"):
        text = sentence("mig_full", gpus=1, models="H100", earliest=None)
        assert "所有可用于 MIG 的 H100 GPU 均已占满" in text
        assert translation.gettext("MIG devices") == "MIG 设备"
        assert translation.gettext("MIG instances are ordered on one node.") != \
            "MIG instances are ordered on one node."


def test_quotas_count_instances_in_gpu_equivalents(mig_pool: dict[str, Any]) -> None:
    """Seven 1g.10gb are 0.994 GPU (not 7 GPUs, nor the 7/8 of their memory slices): they
    fit a quota of one GPU; one more instance does not, and the refusal names gpu_count."""
    from portal.leasing.models import Quota
    from portal.leasing.quotas import gpus_held

    Quota.objects.create(tenant=mig_pool["t0"], gpu_model="H100", max_gpus=1)
    lease = order(mig_pool, 0, gpu_count=7)
    drive()
    lease.refresh_from_db()
    assert lease.state == S.ACTIVE
    assert gpus_held(mig_pool["t0"], "H100", lease.start_at, lease.end_at) == Decimal("0.994")
    Gpu.objects.filter(index=1).update(mig_mode=MigMode.DYNAMIC)  # room, but no quota
    with pytest.raises(ApplicationError) as err:
        order(mig_pool, 0)
    assert "gpu_count" in err.value.fields


def test_a_node_of_an_old_agent_is_never_offered_for_mig(mig_pool: dict[str, Any]) -> None:
    """N-1 (issue 31): an agent of the previous release (0.1.0) ignores the desired MIG
    layout, so its node's GPUs are whole-only whatever their mode says: the order is
    refused in words instead of timing out in provisioning."""
    Node.objects.update(agent_version="0.1.0")
    with pytest.raises(ApplicationError, match="offered for MIG"):
        order(mig_pool, 0)
    assert not Lease.objects.exists() and not MigInstance.objects.exists()
    Node.objects.update(agent_version="0.2.0")  # upgraded
    lease = order(mig_pool, 0)
    drive()
    lease.refresh_from_db()
    assert lease.state == S.ACTIVE
