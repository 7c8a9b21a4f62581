"""Finding 2: access follows people. Every change of who may log in reaches the desired
state of the nodes of the tenant's running leases as soon as the service call commits,
without waiting for some unrelated lease transition."""

from __future__ import annotations

import base64
import struct
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import DatabaseError

from portal.core.errors import ApplicationError
from portal.fleet.models import NodeDesiredState
from portal.leasing import access_push, desired, services
from portal.leasing.lifecycle import reconcile
from portal.leasing.models import Lease
from portal.tenants import services as tenant_services
from portal.tenants.models import Membership, Role, SshPublicKey
from tests.portal import driving
from tests.portal.driving import drive
from tests.portal.factories import add_member, make_user

frozen_clock = driving.frozen_clock
run_on_commit = driving.run_on_commit


@pytest.fixture(autouse=True)
def _no_axes_between_tests(settings: Any) -> None:
    settings.AXES_ENABLED = False


def key_line(seed: int) -> str:
    body = struct.pack(">I", 11) + b"ssh-ed25519" + struct.pack(">I", 32) + bytes([seed]) * 32
    return f"ssh-ed25519 {base64.b64encode(body).decode()} seed{seed}@host"


def give_key(user: Any, seed: int) -> str:
    """A key stored directly (no push): the tests below push through the services."""
    line = key_line(seed)
    SshPublicKey.objects.create(user=user, name=f"k{seed}", key_type="ssh-ed25519",
                                public_key=line, fingerprint=f"SHA256:fp{seed}")
    return line


@pytest.fixture
def world(db: Any, frozen_clock: datetime) -> dict[str, Any]:
    """Tenant a: olga owner, adam admin, alice and ann members, vic viewer, each with a
    key; alice holds an active 8-GPU lease."""
    a, b = driving.small_pool()
    w: dict[str, Any] = {"a": a, "b": b, "staff": make_user("root", staff=True)}
    for seed, (name, role) in enumerate([("olga", Role.OWNER), ("adam", Role.ADMIN),
                                         ("alice", Role.MEMBER), ("ann", Role.MEMBER),
                                         ("vic", Role.VIEWER)], start=1):
        w[name] = add_member(a, name, role)
        w[f"{name}_key"] = give_key(w[name], seed)
    lease = services.order_create(actor=w["alice"], tenant=a, spec=services.OrderSpec(
        models=["H100"], gpu_count=8, duration_hours=Decimal(2)))
    drive()
    lease.refresh_from_db()
    assert lease.state == "active", lease.state
    w["lease"] = lease
    return w


def grants_of(lease: Lease) -> list[dict[str, Any]]:
    account = f"lease-{lease.pk.hex[:12]}"
    docs = NodeDesiredState.objects.filter(node__allocations__lease=lease).distinct()
    found = [g for d in docs for g in d.document.get("access_grants", [])
             if g["account"] == account]
    assert found, "the lease has no grant in any node's desired state"
    return found


def keys_on_hosts(lease: Lease) -> set[str]:
    return {k for g in grants_of(lease) for k in g["ssh_authorized_keys"]}


def committed(capture: Any, fn: Any, **kw: Any) -> Any:
    """Run a service call and its on-commit hooks (the test's transaction stands in for
    the commit)."""
    with capture(execute=True):
        return fn(**kw)


def member(w: dict[str, Any], name: str) -> Membership:
    return Membership.objects.get(tenant=w["a"], user=w[name])


def test_viewer_gets_no_host_login(world: dict[str, Any]) -> None:
    keys = keys_on_hosts(world["lease"])
    assert world["vic_key"] not in keys
    assert {world["olga_key"], world["adam_key"], world["alice_key"], world["ann_key"]} <= keys


def test_removed_member_key_leaves_running_leases(
        world: dict[str, Any], django_capture_on_commit_callbacks: Any) -> None:
    assert world["ann_key"] in keys_on_hosts(world["lease"])
    committed(django_capture_on_commit_callbacks, tenant_services.membership_remove,
              actor=world["adam"], member=member(world, "ann"))
    assert world["ann_key"] not in keys_on_hosts(world["lease"])
    assert world["alice_key"] in keys_on_hosts(world["lease"])


def test_demoted_member_key_leaves_running_leases(
        world: dict[str, Any], django_capture_on_commit_callbacks: Any) -> None:
    committed(django_capture_on_commit_callbacks, tenant_services.membership_change_role,
              actor=world["adam"], member=member(world, "ann"), role=Role.VIEWER)
    assert world["ann_key"] not in keys_on_hosts(world["lease"])


def test_promoted_viewer_key_reaches_running_leases(
        world: dict[str, Any], django_capture_on_commit_callbacks: Any) -> None:
    committed(django_capture_on_commit_callbacks, tenant_services.membership_change_role,
              actor=world["adam"], member=member(world, "vic"), role=Role.MEMBER)
    assert world["vic_key"] in keys_on_hosts(world["lease"])


def test_deleted_ssh_key_leaves_running_leases(
        world: dict[str, Any], django_capture_on_commit_callbacks: Any) -> None:
    key = SshPublicKey.objects.get(user=world["ann"])
    committed(django_capture_on_commit_callbacks, tenant_services.ssh_key_delete,
              actor=world["ann"], key_id=str(key.pk))
    assert world["ann_key"] not in keys_on_hosts(world["lease"])


def test_added_ssh_key_reaches_running_leases(
        world: dict[str, Any], django_capture_on_commit_callbacks: Any) -> None:
    line = key_line(42)
    committed(django_capture_on_commit_callbacks, tenant_services.ssh_key_add,
              actor=world["ann"], name="new laptop", public_key=line)
    assert line in keys_on_hosts(world["lease"])


def test_deactivated_user_key_leaves_running_leases(
        world: dict[str, Any], django_capture_on_commit_callbacks: Any) -> None:
    committed(django_capture_on_commit_callbacks, tenant_services.user_set_active,
              actor=world["staff"], user=world["ann"], active=False)
    assert world["ann_key"] not in keys_on_hosts(world["lease"])
    committed(django_capture_on_commit_callbacks, tenant_services.user_set_active,
              actor=world["staff"], user=world["ann"], active=True)
    assert world["ann_key"] in keys_on_hosts(world["lease"])


def test_suspended_tenant_keys_leave_running_leases(
        world: dict[str, Any], django_capture_on_commit_callbacks: Any) -> None:
    committed(django_capture_on_commit_callbacks, tenant_services.tenant_set_status,
              actor=world["staff"], tenant=world["a"], status="suspended")
    assert keys_on_hosts(world["lease"]) == set()
    committed(django_capture_on_commit_callbacks, tenant_services.tenant_set_status,
              actor=world["staff"], tenant=world["a"], status="active")
    assert world["alice_key"] in keys_on_hosts(world["lease"])


def test_access_change_raises_the_generation_agents_wait_for(
        world: dict[str, Any], django_capture_on_commit_callbacks: Any) -> None:
    before = {d.node_id: d.generation for d in NodeDesiredState.objects.all()}
    committed(django_capture_on_commit_callbacks, tenant_services.membership_remove,
              actor=world["adam"], member=member(world, "ann"))
    lease_nodes = {n.pk for n in access_push.nodes_of_tenants([world["a"].pk])}
    assert lease_nodes
    for d in NodeDesiredState.objects.filter(node_id__in=lease_nodes):
        assert d.generation == before[d.node_id] + 1


def test_refused_change_pushes_nothing(
        world: dict[str, Any], django_capture_on_commit_callbacks: Any) -> None:
    before = {d.node_id: d.generation for d in NodeDesiredState.objects.all()}
    with pytest.raises(ApplicationError), django_capture_on_commit_callbacks(execute=True):
        tenant_services.membership_remove(actor=world["alice"], member=member(world, "ann"))
    assert {d.node_id: d.generation for d in NodeDesiredState.objects.all()} == before
    assert world["ann_key"] in keys_on_hosts(world["lease"])


def test_grant_not_after_is_the_lease_end(world: dict[str, Any]) -> None:
    for grant in grants_of(world["lease"]):
        assert grant["not_after"] == world["lease"].end_at.isoformat()


def test_other_tenants_nodes_are_not_pushed(
        world: dict[str, Any], django_capture_on_commit_callbacks: Any) -> None:
    bob = add_member(world["b"], "bob", Role.ADMIN)
    give_key(bob, 9)
    lease_nodes = {n.pk for n in access_push.nodes_of_tenants([world["a"].pk])}
    idle = NodeDesiredState.objects.exclude(node_id__in=lease_nodes)
    before = {d.node_id: d.generation for d in idle}
    committed(django_capture_on_commit_callbacks, tenant_services.membership_remove,
              actor=world["adam"], member=member(world, "ann"))
    assert {d.node_id: d.generation for d in idle} == before


@pytest.mark.services("postgres")
@pytest.mark.django_db(transaction=True)
def test_removed_member_key_leaves_running_leases_after_a_real_commit(
        world: dict[str, Any]) -> None:
    """No captured hooks: the service's own transaction commits on PostgreSQL and the
    on-commit push runs for real."""
    tenant_services.membership_remove(actor=world["adam"], member=member(world, "ann"))
    assert world["ann_key"] not in keys_on_hosts(world["lease"])


def test_extended_lease_grants_move_not_after(
        world: dict[str, Any], django_capture_on_commit_callbacks: Any) -> None:
    """Once agents enforce ``not_after``, an extension must reach the hosts at once or the
    lease's users would be locked out at the old end."""
    lease = world["lease"]
    new_end = lease.end_at + timedelta(hours=1)
    committed(django_capture_on_commit_callbacks, services.lease_extend,
              actor=world["alice"], lease=lease, end_at=new_end)
    for grant in grants_of(lease):
        assert grant["not_after"] == new_end.isoformat()


def test_admin_site_edits_reach_the_hosts(
        world: dict[str, Any], django_capture_on_commit_callbacks: Any) -> None:
    """The Django admin bypasses the services; its membership and user edits still push."""
    from django.test import Client
    from django.urls import reverse

    root = make_user("super", staff=True, is_superuser=True)
    site = Client()
    site.force_login(root)
    ann = member(world, "ann")
    with django_capture_on_commit_callbacks(execute=True):
        response = site.post(reverse("admin:tenants_membership_change", args=[ann.pk]), {
            "tenant": world["a"].pk, "user": world["ann"].pk, "role": "viewer", "max_gpus": ""})
    assert response.status_code == 302, response.content[:2000]
    assert world["ann_key"] not in keys_on_hosts(world["lease"])
    alice = world["alice"]
    with django_capture_on_commit_callbacks(execute=True):
        response = site.post(reverse("admin:auth_user_change", args=[alice.pk]), {
            "username": alice.username, "email": alice.email, "is_active": "",
            "date_joined_0": "2026-11-01", "date_joined_1": "09:00:00",
            "initial-date_joined_0": "2026-11-01", "initial-date_joined_1": "09:00:00"})
    assert response.status_code == 302, response.content[:3000]
    assert world["alice_key"] not in keys_on_hosts(world["lease"])


# --- issue 10.2: the reconciler re-pushes what a failed access push left behind ---------

def _failing_push(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(node: Any) -> int:
        raise DatabaseError("simulated: the node's desired-state row is locked away")
    monkeypatch.setattr(desired, "push_node", refuse)


def test_reconciler_repairs_a_failed_access_push(
        world: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
        django_capture_on_commit_callbacks: Any) -> None:
    lease = world["lease"]
    with monkeypatch.context() as patch:
        _failing_push(patch)
        with django_capture_on_commit_callbacks(execute=True):
            tenant_services.membership_remove(actor=world["adam"], member=member(world, "ann"))
    assert world["ann_key"] in keys_on_hosts(lease)  # the push failed: only logged
    nodes = access_push.nodes_of_tenants([world["a"].pk])
    assert nodes
    with django_capture_on_commit_callbacks(execute=True):
        counts = reconcile.reconcile_once()
    assert counts["repushed"] == len(nodes)
    assert world["ann_key"] not in keys_on_hosts(lease)
    assert world["alice_key"] in keys_on_hosts(lease)


def test_reconciler_leaves_nodes_in_sync_alone(
        world: dict[str, Any], django_capture_on_commit_callbacks: Any) -> None:
    before = {d.node_id: (d.generation, d.updated) for d in NodeDesiredState.objects.all()}
    with django_capture_on_commit_callbacks(execute=True):
        assert reconcile.repush_drifted_nodes() == 0
    assert {d.node_id: (d.generation, d.updated)
            for d in NodeDesiredState.objects.all()} == before


def test_reconciler_beat_checks_a_bounded_slice_not_every_granting_node(
        world: dict[str, Any], monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    """Regression (issue 12, found measuring idle agents at 1,000 nodes: ≈ 40 commits/s
    with 40 leases and no agent traffic): every 5 s beat re-derived the desired state of
    every granting node, a handful of queries each. Now a slice sized to cover them all
    once per GPUPOOL_REPUSH_SWEEP_S, plus the nodes whose push failed."""
    from django.core.cache import cache

    from portal.inventory.models import Node
    from portal.leasing.lifecycle import repair

    settings.GPUPOOL_REPUSH_MIN_PER_BEAT = 1
    settings.GPUPOOL_REPUSH_SWEEP_S = 3600
    cache.delete_many([repair.CURSOR_KEY, repair.FAILED_KEY])
    every = list(Node.objects.order_by("pk").values_list("pk", flat=True))
    assert len(every) >= 3
    monkeypatch.setattr(repair, "granting_nodes", lambda: every)
    derived: list[int] = []
    real = desired.node_drifted

    def counting(node: Any, stored: Any) -> bool:
        derived.append(node.pk)
        return bool(real(node, stored))

    monkeypatch.setattr(desired, "node_drifted", counting)
    for _ in every:
        reconcile.repush_drifted_nodes()
    assert sorted(derived) == every  # one node per beat, each once, round robin
    derived.clear()
    repair.FAILED.add([every[-1]])
    reconcile.repush_drifted_nodes()
    assert sorted(derived) == sorted({every[0], every[-1]})  # the failure, at once
    assert repair.FAILED.take() == []


def test_repush_slice_covers_the_fleet_once_per_sweep(settings: Any) -> None:
    from django.core.cache import cache

    from portal.leasing.lifecycle import repair

    settings.RECONCILE_EVERY_S = 5
    settings.GPUPOOL_REPUSH_SWEEP_S = 600
    settings.GPUPOOL_REPUSH_MIN_PER_BEAT = 20
    assert repair._budget(40) == 20 and repair._budget(10_000) == 84
    cache.delete(repair.CURSOR_KEY)
    seen = [pk for _ in range(3) for pk in repair.next_slice(list(range(1, 51)), 20)]
    assert seen[:50] == list(range(1, 51)) and seen[50:] == list(range(1, 11))


def test_stored_grants_are_found_in_the_database_not_read_out(world: dict[str, Any]) -> None:
    """``repair.nodes_with_stored_grants`` picks the documents that grant something in SQL
    (it used to read every node's grant list, SSH keys included, every beat); the same
    nodes as the Python test of each document, whatever shape the document has."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from portal.inventory.models import Node
    from portal.leasing.lifecycle import repair

    shapes: list[dict[str, Any]] = [
        {}, {"partitions": []}, {"access_grants": []}, {"access_grants": None},
        {"access_grants": [{"lease_id": "ls_1", "account": "lease-1"}]},
        {"access_grants": [{}]}, {"access_grants": [], "partitions": [{"pkey": "0x8001"}]}]
    nodes = list(Node.objects.order_by("pk"))
    for first in range(0, len(shapes), len(nodes)):  # every shape, a pool's worth at a time
        batch = shapes[first:first + len(nodes)]
        for node, document in zip(nodes, batch, strict=False):
            NodeDesiredState.objects.update_or_create(node=node,
                                                      defaults={"document": document})
        python = sorted(row.node_id for row in NodeDesiredState.objects.all()
                        if (row.document or {}).get("access_grants"))
        with CaptureQueriesContext(connection) as ctx:
            found = sorted(repair.nodes_with_stored_grants())
        assert found == python, batch
        assert len(ctx.captured_queries) == 1
        assert "access_grants" not in ctx.captured_queries[0]["sql"].split("FROM")[0]
    assert found == [nodes[0].pk, nodes[1].pk]  # last batch: two granting, then [] and null
