"""The world of the operators' MIG tests (fixed layouts, mode switches): one H100 node with
two GPUs in whole mode, a staff operator and a few tenants."""

from __future__ import annotations

from typing import Any

from portal.inventory.generator import ClusterSpec, cluster_generate
from portal.tenants.models import Role
from tests.portal.factories import add_member, client_for, make_tenant, make_user


def operator_pool(tenants: int, role: Role) -> dict[str, Any]:
    """One H100 node × 2 GPUs, whole mode. Keys: ``staff``, the staff operator's client;
    ``t0``… the tenants; ``0``… each tenant's one member, with ``role``."""
    cluster_generate(actor=None, spec=ClusterSpec(nodes=1, gpus_per_node=2, nodes_per_leaf=1,
                                                  spines=1, model="H100"))
    people: dict[str, Any] = {"staff": client_for(make_user("op", staff=True))}
    for n in range(tenants):
        tenant = make_tenant(f"t{n}")
        people[str(n)] = add_member(tenant, f"u{n}", role)
        people[f"t{n}"] = tenant
    return people
