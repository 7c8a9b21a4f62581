"""The operator's switch of a node or GPU to whole or dynamic MIG use (issue 28,
``PUT /api/v1/fleet/nodes/{hostname}/mig-mode``): a busy instance is never destroyed
(409 naming the field and the instance, nothing changed), fixed → dynamic keeps live
instances, a GPU held whole may go dynamic, bad input is a 400 naming the field, staff
only, audited with the reason, the desired state pushed; the admin shows the modes
read-only and points to the API."""

from __future__ import annotations

import importlib
import re
from decimal import Decimal
from typing import Any

import pytest
import yaml
from django.urls import reverse

from portal.core import clock
from portal.core.models import AuditLog
from portal.fleet import protocol
from portal.fleet.models import NodeDesiredState, NodeObservedState
from portal.fleet.services import agent_for_node
from portal.fleet.services.ingest import report_ingest
from portal.inventory.models import Gpu, HcaPort, MigMode, Node
from portal.leasing import allocation, desired, services
from portal.leasing.lifecycle import placing
from portal.leasing.models import Allocation, Lease, MigInstance
from portal.leasing.models import LeaseState as S
from portal.leasing.simulation import report_for
from portal.tenants.models import Role
from portal.tenants.services import api_key_create
from tests.portal.factories import client_for, make_user
from tests.portal.leasing.conftest import drive
from tests.portal.leasing.mig_operator_pool import operator_pool

HOST = "gpu-node-0001"
ONE_G = yaml.safe_dump({"version": "v1", "mig-configs": {
    "all-1g": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]}})


@pytest.fixture
def pool(db: Any, frozen_clock: Any) -> dict[str, Any]:
    """One H100 node × 2 GPUs, whole mode; a staff operator and three tenants."""
    return operator_pool(tenants=3, role=Role.ADMIN)


def put(pool: dict[str, Any], client: Any = None, **body: Any) -> Any:
    body.setdefault("reason", "rack 4 goes MIG")
    return (client or pool["staff"]).put(reverse("node-mig-mode", kwargs={"hostname": HOST}),
                                         body, format="json")


def order(pool: dict[str, Any], n: int, profile: str = "", count: int = 1) -> Lease:
    spec = services.OrderSpec(models=["H100"], mig_profile=profile, gpu_count=count,
                              duration_hours=Decimal(2))
    lease = services.order_create(actor=pool[str(n)], tenant=pool[f"t{n}"], spec=spec)
    drive()
    lease.refresh_from_db()
    assert lease.state == S.ACTIVE, (lease.state, lease.wait_reason)
    return lease


def modes() -> tuple[Any, ...]:
    node = Node.objects.get()
    return (node.mig_mode, node.mig_layout,
            tuple(Gpu.objects.order_by("index").values_list("mig_mode", "mig_layout")))


def pushed_mig() -> list[dict[str, Any]]:
    return list(NodeDesiredState.objects.get(node__hostname=HOST).document.get("mig") or [])


def live_instances() -> list[tuple[int, str, int]]:
    return sorted(MigInstance.objects.filter(allocation__live=True).values_list(
        "gpu__index", "profile", "start"))


def generations() -> list[int]:
    return list(NodeDesiredState.objects.values_list("generation", flat=True))


def audits() -> int:
    return AuditLog.objects.filter(action="node.mig_mode").count()


def test_dynamic_then_whole_pushes_the_desired_state_and_audits_the_reason(
        pool: dict[str, Any]) -> None:
    response = put(pool, mode="dynamic")
    assert response.status_code == 200, response.content
    assert response.json()["gpus"] == [{"index": 0, "mode": "dynamic", "own": False},
                                       {"index": 1, "mode": "dynamic", "own": False}]
    assert pushed_mig() == [{"gpu_index": 0, "instances": []},
                            {"gpu_index": 1, "instances": []}]
    entry = AuditLog.objects.get(action="node.mig_mode")
    assert entry.changes["reason"] == "rack 4 goes MIG" and entry.changes["to"] == "dynamic"
    assert entry.changes["from"] == {"mode": "whole", "layout": {}}
    assert put(pool, mode="whole", reason="back").status_code == 200
    assert modes()[0] == MigMode.WHOLE and pushed_mig() == []
    assert audits() == 2


def test_whole_over_a_leased_instance_is_409_naming_it_and_changes_nothing(
        pool: dict[str, Any]) -> None:
    assert put(pool, mode="dynamic").status_code == 200
    lease = order(pool, 0, "1g.10gb")
    [placed] = live_instances()
    gpu = placed[0]
    before, pushed, logged = modes(), pushed_mig(), audits()
    for body in ({"mode": "whole"}, {"mode": "whole", "gpu": gpu}):
        response = put(pool, **body)
        assert response.status_code == 409, response.content
        [message] = response.json()["fields"]["mode"]
        assert "1g.10gb" in message and str(lease.pk) in message, message
        assert modes() == before and pushed_mig() == pushed and audits() == logged
    lease.refresh_from_db()
    assert lease.state == S.ACTIVE and live_instances() == [placed]
    # the other GPU holds nothing: it may go whole on its own
    other = 1 - gpu
    assert put(pool, mode="whole", gpu=other).status_code == 200
    assert Gpu.objects.get(index=other).mig_mode == MigMode.WHOLE
    # once the instance is released (and torn down), the node may go whole
    services.lease_release(actor=pool["0"], lease=lease)
    drive()
    assert live_instances() == []
    assert put(pool, mode="whole").status_code == 200


def test_fixed_to_dynamic_keeps_the_live_instance(pool: dict[str, Any]) -> None:
    staff = pool["staff"]
    assert staff.post(reverse("node-mig-layout", kwargs={"hostname": HOST}),
                      {"config": ONE_G, "name": "all-1g"}, format="json").status_code == 200
    lease = order(pool, 0, "1g.10gb")
    [(gpu, _, start)] = live_instances()
    response = put(pool, mode="dynamic")
    assert response.status_code == 200, response.content
    node = Node.objects.get()
    assert node.mig_mode == MigMode.DYNAMIC and node.mig_layout == {}
    lease.refresh_from_db()
    assert lease.state == S.ACTIVE and live_instances() == [(gpu, "1g.10gb", start)]
    # dynamic holds the leased instance only: the layout's idle ones go
    mig = {g["gpu_index"]: g["instances"] for g in pushed_mig()}
    assert mig[gpu] == [{"profile": "1g.10gb", "start": start}] and mig[1 - gpu] == []


def test_a_gpu_held_whole_may_go_dynamic(pool: dict[str, Any]) -> None:
    whole = order(pool, 0, count=2)
    assert put(pool, mode="dynamic", gpu=0).status_code == 200
    assert put(pool, mode="dynamic").status_code == 200
    whole.refresh_from_db()
    assert whole.state == S.ACTIVE
    assert Allocation.objects.filter(lease=whole, live=True).exists()
    # dynamic only splits a free GPU: a MIG order waits while both are held whole
    mig = services.order_create(actor=pool["1"], tenant=pool["t1"], spec=services.OrderSpec(
        models=["H100"], mig_profile="1g.10gb", gpu_count=1, duration_hours=Decimal(2)))
    drive()
    mig.refresh_from_db()
    assert mig.state == S.QUEUED and not MigInstance.objects.exists()


def test_inherit_clears_a_gpus_own_mode_and_is_guarded_too(pool: dict[str, Any]) -> None:
    assert put(pool, mode="dynamic", gpu=0).status_code == 200
    assert Gpu.objects.get(index=0).mig_mode == MigMode.DYNAMIC
    lease = order(pool, 0, "1g.10gb")
    [placed] = live_instances()
    assert placed[:2] == (0, "1g.10gb")  # the only dynamic GPU
    before = modes()
    response = put(pool, mode="inherit", gpu=0)  # the node is whole: would destroy it
    assert response.status_code == 409 and "mode" in response.json()["fields"]
    assert modes() == before
    assert put(pool, mode="dynamic").status_code == 200
    assert put(pool, mode="inherit", gpu=0).status_code == 200  # the node's: dynamic
    assert Gpu.objects.get(index=0).mig_mode == "" and live_instances() == [placed]
    lease.refresh_from_db()
    assert lease.state == S.ACTIVE


@pytest.mark.parametrize(("body", "field"), [
    ({"reason": "r"}, "mode"),
    ({"mode": "fixed"}, "mode"),
    ({"mode": "split-it"}, "mode"),
    ({"mode": "inherit"}, "mode"),  # inherit is for a GPU
    ({"mode": 7}, "mode"),
    ({"mode": "dynamic", "gpu": 2}, "gpu"),  # GPUs 0 and 1
    ({"mode": "dynamic", "gpu": -1}, "gpu"),
    ({"mode": "dynamic", "gpu": "first"}, "gpu"),
    ({"mode": "dynamic", "reason": ""}, "reason"),
    ({"mode": "dynamic", "reason": "   "}, "reason"),
    ({"mode": "dynamic", "reason": "x" * 251}, "reason"),
    ({"mode": "dynamic", "reason": None}, "reason"),
    ({"mode": "dynamic", "layout": {}}, "layout"),
])
def test_bad_input_is_400_naming_the_field_and_changes_nothing(
        pool: dict[str, Any], body: dict[str, Any], field: str) -> None:
    before, logged, pushed = modes(), audits(), generations()
    response = put(pool, **body)
    assert response.status_code == 400, response.content
    assert field in response.json()["fields"], response.json()
    assert modes() == before and audits() == logged and generations() == pushed


def test_fixed_is_refused_with_a_pointer_to_the_import(pool: dict[str, Any]) -> None:
    response = put(pool, mode="fixed")
    assert response.status_code == 400
    assert f"/api/v1/fleet/nodes/{HOST}/mig-layout" in response.json()["fields"]["mode"][0]


def test_only_platform_staff(pool: dict[str, Any]) -> None:
    response = put(pool, client_for(pool["0"]), mode="dynamic")  # a tenant admin
    assert response.status_code == 403
    key = api_key_create(actor=pool["0"], name="k", tenant=pool["t0"]).secret
    keyed = client_for(None)
    keyed.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert put(pool, keyed, mode="dynamic").status_code == 403
    assert put(pool, client_for(None), mode="dynamic").status_code == 401
    assert modes()[0] == MigMode.WHOLE and audits() == 0
    missing = pool["staff"].put(reverse("node-mig-mode", kwargs={"hostname": "nope"}),
                                {"mode": "dynamic", "reason": "r"}, format="json")
    assert missing.status_code == 404


def test_a_gpu_switched_to_whole_is_told_to_drop_mig_until_its_agent_has(
        pool: dict[str, Any]) -> None:
    """The agent leaves a GPU the desired state does not list alone: a GPU leaving
    dynamic use stays listed with no instances while the agent still reports MIG on."""
    assert put(pool, mode="dynamic").status_code == 200
    node = Node.objects.get()
    NodeObservedState.objects.update_or_create(node=node, defaults={"document": {"mig": [
        {"gpu_index": 0, "mode": "enabled", "instances": []},
        {"gpu_index": 1, "mode": "disabled", "instances": []}]}})
    assert put(pool, mode="whole").status_code == 200
    assert pushed_mig() == [{"gpu_index": 0, "instances": []}]
    NodeObservedState.objects.filter(node=node).update(document={"mig": [
        {"gpu_index": 0, "mode": "disabled", "instances": []}]})
    node.refresh_from_db()  # the put changed it
    assert desired.derive_node(node)["mig"] == []


def test_the_admin_shows_the_mig_mode_read_only_and_points_to_the_api(
        pool: dict[str, Any], client: Any) -> None:
    admin = make_user("root", staff=True, is_superuser=True)
    client.force_login(admin)
    node, gpu = Node.objects.get(), Gpu.objects.get(index=0)
    for url in (reverse("admin:inventory_node_change", args=[node.pk]),
                reverse("admin:inventory_gpu_change", args=[gpu.pk])):
        page = client.get(url).content.decode()
        assert f"/api/v1/fleet/nodes/{HOST}/mig-mode" in page
        # not a form field (node or GPU, nor the node page's GPU rows): no unguarded edit
        assert not re.search(r'name="[^"]*mig_(mode|layout)"', page)


def test_with_the_simulated_agent_a_gpu_back_to_whole_leaves_the_list(
        pool: dict[str, Any]) -> None:
    """The simulated agent reports MIG off on a listed GPU with no instances (as the agent
    does), so the wind-down entry of a GPU back to whole ends."""
    assert put(pool, mode="dynamic").status_code == 200
    lease = order(pool, 0, "1g.10gb")
    observed = NodeObservedState.objects.get().document["mig"]
    assert sorted(g["mode"] for g in observed) == ["disabled", "enabled"]
    services.lease_release(actor=pool["0"], lease=lease)
    drive()
    assert put(pool, mode="whole").status_code == 200
    drive()
    assert pushed_mig() == [] and desired.derive_node(Node.objects.get())["mig"] == []


# A GPU switched to whole takes no whole-GPU lease while its agent still reports it split
# (ADR 0244): the reported state is kept per GPU (``Gpu.mig_reported_split``) by the
# report that carries it, and the pass reads that column.

def agent_reports(mig: list[dict[str, Any]]) -> None:
    """The node's agent reports ``mig`` (the real ingestion path, protocol v1)."""
    node = Node.objects.get()
    agent = agent_for_node(node=node)
    body = report_for(node, list(Gpu.objects.filter(node=node).order_by("index")),
                      list(HcaPort.objects.filter(node=node)), set(), agent.last_seq + 1,
                      clock.now(), NodeDesiredState.objects.get(node=node).generation,
                      agent.agent_id)
    body["observed"]["mig"] = mig
    assert protocol.validate_report(body) == []
    report_ingest(agent=agent, body=body)


def gpu_report(index: int, mode: str, instances: int = 0) -> dict[str, Any]:
    return {"gpu_index": index, "mode": mode, "errors": [], "instances": [
        {"profile": "1g.10gb", "start": s, "gpu_instance_id": s + 1,
         "uuid": f"MIG-00000000-0000-0000-0000-00000000{index}{s:03d}"}
        for s in range(instances)]}


def reported_split() -> list[bool]:
    return list(Gpu.objects.order_by("index").values_list("mig_reported_split", flat=True))


def placed_on(lease: Lease) -> list[int]:
    return sorted(Allocation.objects.filter(lease=lease, live=True).values_list(
        "gpu__index", flat=True).distinct())


def schedule_pass() -> None:
    placing.run_schedule_pass()


def test_a_gpu_switched_to_whole_waits_for_its_agent_before_a_whole_lease_regression(
        pool: dict[str, Any]) -> None:
    """Both GPUs in a fixed all-1g layout, idle instances on both; GPU 0 goes whole. Its
    agent still reports MIG on there: a whole order (which only GPU 0 could take, GPU 1
    staying fixed) waits, and a MIG order cannot use GPU 0 either; once the agent reports
    MIG off there, the whole order is placed on it."""
    assert pool["staff"].post(reverse("node-mig-layout", kwargs={"hostname": HOST}),
                              {"config": ONE_G, "name": "all-1g"},
                              format="json").status_code == 200
    agent_reports([gpu_report(0, "enabled", 7), gpu_report(1, "enabled", 7)])
    assert reported_split() == [True, True]
    assert put(pool, mode="whole", gpu=0).status_code == 200
    assert pushed_mig()[0] == {"gpu_index": 0, "instances": []}  # told to drop MIG
    whole = services.order_create(actor=pool["0"], tenant=pool["t0"], spec=services.OrderSpec(
        models=["H100"], gpu_count=1, duration_hours=Decimal(2)))
    mig = services.order_create(actor=pool["1"], tenant=pool["t1"], spec=services.OrderSpec(
        models=["H100"], mig_profile="1g.10gb", gpu_count=1, duration_hours=Decimal(2)))
    schedule_pass()
    whole.refresh_from_db()
    assert whole.state == S.QUEUED and placed_on(whole) == []  # GPU 0 is still split
    assert [i for i, _, _ in live_instances()] == [1]  # GPU 0 is whole now: no MIG there
    # the agent still winds down (instances destroyed, MIG on): still no whole lease
    agent_reports([gpu_report(0, "pending_reset"), gpu_report(1, "enabled", 7)])
    schedule_pass()
    whole.refresh_from_db()
    assert whole.state == S.QUEUED and reported_split() == [True, True]
    # MIG off on GPU 0: the whole order goes there
    agent_reports([gpu_report(0, "disabled"), gpu_report(1, "enabled", 7)])
    assert reported_split() == [False, True]
    schedule_pass()
    whole.refresh_from_db()
    assert whole.state != S.QUEUED and placed_on(whole) == [0], (whole.state,
                                                                  whole.wait_reason)
    mig.refresh_from_db()
    assert placed_on(mig) == [1]


def test_the_reported_split_follows_the_agents_reports_both_ways(
        pool: dict[str, Any]) -> None:
    assert put(pool, mode="dynamic").status_code == 200
    assert reported_split() == [False, False]
    agent_reports([gpu_report(0, "enabled"), gpu_report(1, "disabled")])
    assert reported_split() == [True, False]
    assert allocation.reported_split_gpus() == {(HOST, 0)}
    agent_reports([gpu_report(0, "disabled"), gpu_report(1, "disabled")])
    assert reported_split() == [False, False] and allocation.reported_split_gpus() == set()
    agent_reports([gpu_report(0, "disabled", 1), gpu_report(1, "enabled")])  # instances
    assert reported_split() == [True, True]
    agent_reports([])  # a GPU no longer reported is not split as far as the agent says
    assert reported_split() == [False, False]
    # the simulated agent raises the same convergence event: the column follows it too
    lease = order(pool, 0, "1g.10gb")
    [(gpu, _, _)] = live_instances()
    assert reported_split()[gpu] is True
    services.lease_release(actor=pool["0"], lease=lease)
    drive()
    assert reported_split() == [False, False]


def test_the_upgrade_fills_the_reported_split_from_the_stored_reports(
        pool: dict[str, Any]) -> None:
    """Deployed on a fleet already reporting: the column starts as the agents last said."""
    from django.apps import apps

    backfill = importlib.import_module(
        "portal.leasing.migrations.0011_gpu_mig_reported_split_backfill")
    NodeObservedState.objects.update_or_create(node=Node.objects.get(), defaults={
        "document": {"mig": [gpu_report(0, "disabled"), gpu_report(1, "pending_reset")]}})
    assert reported_split() == [False, False]
    backfill.forwards(apps, None)
    assert reported_split() == [False, True]
