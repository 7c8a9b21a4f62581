"""Fixed MIG layouts on the portal (issue 28, ADR 0238): a mig-parted config imported by an
operator (API and command), refused field by field when bad, offered exactly as laid out,
never reconfigured nor used whole, and pushed to the agent as the instances to hold."""

from __future__ import annotations

from decimal import Decimal
from io import StringIO
from typing import Any

import psycopg
import pytest
import yaml
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction
from django.urls import reverse

from portal.fleet.models import NodeDesiredState
from portal.inventory.models import Gpu, MigMode, Node
from portal.leasing import services
from portal.leasing.lifecycle.placing import SCHEDULE_LOCK
from portal.leasing.models import Allocation, Lease, MigInstance
from portal.leasing.models import LeaseState as S
from portal.tenants.models import Role
from tests.portal.factories import client_for
from tests.portal.leasing.conftest import drive
from tests.portal.leasing.mig_operator_pool import operator_pool

HOST = "gpu-node-0001"


def mig_file(**configs: list[dict[str, Any]]) -> str:
    return yaml.safe_dump({"version": "v1", "mig-configs": configs})


FILE = mig_file(**{
    "all-1g.10gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
    "mixed": [{"devices": "all", "mig-enabled": False},
              {"devices": [0], "mig-enabled": True,
               "mig-devices": {"3g.40gb": 1, "1g.10gb": 4}}],
    "gpu0-1g": [{"devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
    "all-2g": [{"devices": "all", "mig-enabled": True, "mig-devices": {"2g.20gb": 3}}],
    "all-disabled": [{"devices": "all", "mig-enabled": False}],
})


@pytest.fixture
def pool(db: Any, frozen_clock: Any) -> dict[str, Any]:
    """One H100 node × 2 GPUs, whole mode; a staff operator and nine tenants."""
    return operator_pool(tenants=9, role=Role.MEMBER)


def apply(pool: dict[str, Any], name: str, text: str = FILE, **kw: Any) -> Any:
    return pool["staff"].post(reverse("node-mig-layout", kwargs={"hostname": HOST}),
                              {"config": text, "name": name, **kw}, format="json")


def order(pool: dict[str, Any], n: int, profile: str = "", count: int = 1) -> Lease:
    spec = services.OrderSpec(models=["H100"], mig_profile=profile, gpu_count=count,
                              duration_hours=Decimal(2))
    return services.order_create(actor=pool[str(n)], tenant=pool[f"t{n}"], spec=spec)


def layout_state() -> tuple[Any, ...]:
    node = Node.objects.get()
    return (node.mig_mode, node.mig_layout,
            tuple(Gpu.objects.order_by("index").values_list("mig_mode", "mig_layout")))


@pytest.mark.parametrize(("text", "name", "extra", "field"), [
    ("version: v1\nmig-configs: [", "c", {}, "config"),  # not YAML
    (mig_file(c=[]).replace("v1", "v9"), "c", {}, "version"),
    (FILE, "no-such-config", {}, "name"),
    (mig_file(c=[{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 7}}]),
     "c", {}, "mig-configs.c[0].mig-devices.1g.5gb"),  # an A100-40GB profile, not H100
    (mig_file(c=[{"devices": "all", "mig-enabled": True,
                  "mig-devices": {"3g.40gb": 1, "1g.10gb": 5}}]),
     "c", {}, "mig-configs.c[0].mig-devices"),  # no valid placement holds them
    (mig_file(c=[{"devices": [0, 2], "mig-enabled": False}]),
     "c", {}, "mig-configs.c[0].devices"),  # the node has GPUs 0 and 1
    (mig_file(c=[{"devices": "first", "mig-enabled": False}]),
     "c", {}, "mig-configs.c[0].devices"),
    (mig_file(c=[{"devices": "all", "mig-enabled": "on"}]),
     "c", {}, "mig-configs.c[0].mig-enabled"),
    (FILE, "gpu0-1g", {"gpu": 5}, "gpu"),
    (FILE, "gpu0-1g", {"gpu": 1}, "gpu"),  # the config does not name GPU 1
    (FILE, "gpu0-1g", {"surprise": 1}, "surprise"),
])
def test_a_bad_import_answers_400_naming_the_field_and_changes_nothing(
        pool: dict[str, Any], text: str, name: str, extra: dict[str, Any], field: str) -> None:
    before = layout_state()
    response = apply(pool, name, text, **extra)
    assert response.status_code == 400, response.content
    assert field in response.json()["fields"], response.json()
    assert layout_state() == before


def test_only_staff_may_import(pool: dict[str, Any]) -> None:
    response = client_for(pool["0"]).post(
        reverse("node-mig-layout", kwargs={"hostname": HOST}),
        {"config": FILE, "name": "all-1g.10gb"}, format="json")
    assert response.status_code == 403
    assert layout_state()[0] == MigMode.WHOLE


def test_seven_tenants_on_a_fixed_gpu_and_the_layout_pushed_to_the_agent(
        pool: dict[str, Any]) -> None:
    response = apply(pool, "mixed")
    assert response.status_code == 200, response.content
    assert response.json()["gpus"]["0"]["instances"] == [
        ["1g.10gb", 0], ["1g.10gb", 1], ["1g.10gb", 2], ["1g.10gb", 3], ["3g.40gb", 4]]
    mig = NodeDesiredState.objects.get(node__hostname=HOST).document["mig"]
    assert mig == [{"gpu_index": 0, "instances": [
        {"profile": "1g.10gb", "start": s} for s in range(4)] + [
        {"profile": "3g.40gb", "start": 4}]}, {"gpu_index": 1, "instances": []}]
    small = [order(pool, n, "1g.10gb") for n in range(4)]
    big = order(pool, 4, "3g.40gb")
    drive()
    for lease in [*small, big]:
        lease.refresh_from_db()
        assert lease.state == S.ACTIVE, (lease.state, lease.wait_reason)
    assert sorted(MigInstance.objects.filter(allocation__live=True).values_list(
        "gpu__index", "profile", "start")) == [
        (0, "1g.10gb", 0), (0, "1g.10gb", 1), (0, "1g.10gb", 2), (0, "1g.10gb", 3),
        (0, "3g.40gb", 4)]
    fifth = order(pool, 5, "1g.10gb")
    drive()
    fifth.refresh_from_db()
    assert fifth.state == S.QUEUED and fifth.wait_reason == "mig_full"
    # GPU 1 (mig-enabled false in "mixed") is a whole GPU
    whole = order(pool, 6, count=1)
    drive()
    whole.refresh_from_db()
    assert whole.state == S.ACTIVE
    assert set(Allocation.objects.filter(lease=whole).values_list("gpu__index", flat=True)) \
        == {1}


def test_a_fixed_gpu_is_never_reconfigured_nor_used_whole(pool: dict[str, Any]) -> None:
    assert apply(pool, "all-1g.10gb").status_code == 200
    two_g = order(pool, 0, "2g.20gb")  # a profile the layout does not have
    whole = order(pool, 1, count=1)
    drive()
    for lease in (two_g, whole):
        lease.refresh_from_db()
        assert lease.state == S.QUEUED, lease.state
    assert not MigInstance.objects.exists() and not Allocation.objects.filter(live=True).exists()
    mig = NodeDesiredState.objects.get(node__hostname=HOST).document["mig"]
    assert [len(g["instances"]) for g in mig] == [7, 7]  # all 1g.10gb, as laid out


def test_a_new_layout_that_would_destroy_a_leased_instance_is_409(pool: dict[str, Any]) -> None:
    assert apply(pool, "all-1g.10gb").status_code == 200
    lease = order(pool, 0, "1g.10gb")
    drive()
    lease.refresh_from_db()
    assert lease.state == S.ACTIVE
    before = layout_state()
    response = apply(pool, "all-2g")
    assert response.status_code == 409, response.content
    assert layout_state() == before
    assert apply(pool, "all-1g.10gb").status_code == 200  # the same layout: fine


def test_a_layout_that_splits_a_gpu_held_whole_is_409(pool: dict[str, Any]) -> None:
    whole = order(pool, 0, count=2)
    drive()
    whole.refresh_from_db()
    assert whole.state == S.ACTIVE
    response = apply(pool, "gpu0-1g", gpu=0)
    assert response.status_code == 409, response.content
    assert layout_state()[2][0] == ("", {})
    assert apply(pool, "all-disabled").status_code == 200  # MIG off: nothing to split


def test_a_per_gpu_override_and_the_command(pool: dict[str, Any], tmp_path: Any) -> None:
    assert apply(pool, "gpu0-1g", gpu=0).status_code == 200
    node = Node.objects.get()
    assert node.mig_mode == MigMode.WHOLE  # only GPU 0 changed
    gpu0 = Gpu.objects.get(index=0)
    assert gpu0.mig_mode == MigMode.FIXED and len(gpu0.mig_layout["instances"]) == 7
    path = tmp_path / "config.yaml"
    path.write_text(FILE)
    out = StringIO()
    call_command("import_mig_config", str(path), "--node", HOST, "--config", "all-2g",
                 stdout=out)
    node.refresh_from_db()
    assert node.mig_mode == MigMode.FIXED and node.mig_layout["config"] == "all-2g"
    mig = NodeDesiredState.objects.get(node__hostname=HOST).document["mig"]
    # GPU 0 keeps its own layout; GPU 1 takes the node's
    assert [[i["profile"] for i in g["instances"]] for g in mig] == [
        ["1g.10gb"] * 7, ["2g.20gb"] * 3]
    with pytest.raises(CommandError, match="nothing was changed"):
        call_command("import_mig_config", str(path), "--node", HOST, "--config", "nope")


def test_import_mig_config_dash_reads_stdin_regression(pool: dict[str, Any]) -> None:
    """``import_mig_config -`` read ``self.stdin``, which a Django command does not have."""
    call_command("import_mig_config", "-", "--node", HOST, "--config", "all-2g",
                 stdin=StringIO(FILE), stdout=StringIO())
    node = Node.objects.get()
    assert node.mig_mode == MigMode.FIXED and node.mig_layout["config"] == "all-2g"


def test_the_import_waits_for_a_running_scheduling_pass_regression(pool: dict[str, Any]) -> None:
    """The import checked that no GPU was leased whole without the pass lock the mode
    switch takes: a pass could place a whole lease between the check and the commit.
    With another worker's pass holding the lock, the import waits (here: times out) and
    changes nothing."""
    before = layout_state()
    d = connection.settings_dict
    other = psycopg.connect(dbname=d["NAME"], user=d["USER"], host=d["HOST"] or None,
                            port=d["PORT"] or None, password=d["PASSWORD"] or None,
                            autocommit=True)
    try:
        other.execute("SELECT pg_advisory_lock(%s)", [SCHEDULE_LOCK])  # a pass runs
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL lock_timeout = '300ms'")
        with pytest.raises(DatabaseError, match="lock timeout"), transaction.atomic():
            apply(pool, "all-2g")
    finally:
        other.close()
    assert layout_state() == before
    assert apply(pool, "all-2g").status_code == 200  # the pass is over: it applies
