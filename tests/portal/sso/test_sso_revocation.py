"""An SSO membership removed by the rules takes the member's SSH key off the hosts of the
tenant's running leases once it commits, as any removal does (tests/portal/test_revocation)."""

from __future__ import annotations

from typing import Any

from portal.sso import identities
from portal.sso.models import MappingRule
from portal.sso.providers import Provider
from portal.tenants.models import Membership, Role
from tests.portal.test_revocation import (  # noqa: F401 (fixtures)
    _no_axes_between_tests,
    frozen_clock,
    keys_on_hosts,
    run_on_commit,
    world,
)

IDP = Provider(name="kc", issuer="https://kc.example.edu/realms/hpc", client_id="gpupool")


def test_group_removed_takes_the_key_off_running_leases(
        world: dict[str, Any], django_capture_on_commit_callbacks: Any) -> None:  # noqa: F811
    MappingRule.objects.create(claim="groups", values="hpc-a-users", tenant=world["a"],
                               role=Role.MEMBER)
    Membership.objects.filter(tenant=world["a"], user=world["ann"]).update(source=IDP.source)
    with django_capture_on_commit_callbacks(execute=True):
        identities.apply_rules(user=world["ann"], provider=IDP,
                               claims={"sub": "ann", "groups": ["hpc-a-users"]})
    assert world["ann_key"] in keys_on_hosts(world["lease"])
    with django_capture_on_commit_callbacks(execute=True):
        identities.apply_rules(user=world["ann"], provider=IDP, claims={"sub": "ann"})
    assert not Membership.objects.filter(tenant=world["a"], user=world["ann"]).exists()
    assert world["ann_key"] not in keys_on_hosts(world["lease"])
    assert world["alice_key"] in keys_on_hosts(world["lease"])
