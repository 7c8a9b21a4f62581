"""Seed data for the demo: a small cluster, two tenants, fixed logins (listed in README)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import transaction

from portal.inventory.generator import ClusterSpec, cluster_generate
from portal.inventory.models import Node
from portal.leasing.models import Quota
from portal.tenants.models import Membership, Role, Tenant

DEMO_PASSWORD = "gpupool-demo"
DEMO_USERS = [
    # username, tenant slug or None for staff, role
    ("operator", None, None),
    ("acme-admin", "acme", Role.ADMIN),
    ("acme-member", "acme", Role.MEMBER),
    ("lotus-admin", "lotus", Role.ADMIN),
    ("lotus-member", "lotus", Role.MEMBER),
]
DEMO_TENANTS = [("acme", "Acme AI", "USD"), ("lotus", "Lotus Lab 莲花实验室", "CNY")]


@transaction.atomic
def seed() -> bool:
    """Create the demo data unless it exists. Returns whether anything was created."""
    if Node.objects.exists():
        return False
    cluster_generate(actor=None, spec=ClusterSpec(nodes=32, gpus_per_node=8, nodes_per_leaf=8,
                                                  spines=2, model="H100", prefix="h100",
                                                  fabric="demo-fabric"))
    cluster_generate(actor=None, spec=ClusterSpec(nodes=4, gpus_per_node=8, nodes_per_leaf=4,
                                                  spines=1, model="A100", prefix="a100",
                                                  fabric="demo-fabric", memory_gib=1024,
                                                  cpu_cores=128))
    tenants = {slug: Tenant.objects.create(slug=slug, name=name, currency=currency,
                                           contact_email=f"ops@{slug}.example")
               for slug, name, currency in DEMO_TENANTS}
    for slug, h100, a100 in (("acme", 128, 16), ("lotus", 64, 16)):
        Quota.objects.create(tenant=tenants[slug], gpu_model="H100", max_gpus=h100,
                             guaranteed_gpus=h100 // 4, gpu_hour_budget=50000)
        Quota.objects.create(tenant=tenants[slug], gpu_model="A100", max_gpus=a100,
                             guaranteed_gpus=0, gpu_hour_budget=10000)
    user_model = get_user_model()
    users = {}
    for username, slug, role in DEMO_USERS:
        user = user_model.objects.create_user(username=username, email=f"{username}@example.com",
                                              password=DEMO_PASSWORD)
        users[username] = user
        if slug is None:
            user.is_staff = user.is_superuser = True
            user.save(update_fields=["is_staff", "is_superuser"])
        else:
            Membership.objects.create(tenant=tenants[slug], user=user, role=role)
    _demo_orders(tenants, users)
    return True


def _demo_orders(tenants: dict[str, Tenant], users: dict[str, object]) -> None:
    """A few leases so that every page has something to show (placed by the first pass)."""
    from decimal import Decimal

    from portal.leasing.services import OrderSpec, order_create

    order_create(actor=users["acme-admin"], tenant=tenants["acme"],  # type: ignore[arg-type]
                 spec=OrderSpec(models=["H100"], gpu_count=8, duration_hours=Decimal(24),
                                name="llm-pretrain", tags={"team": "research"}))
    order_create(actor=users["lotus-admin"], tenant=tenants["lotus"],  # type: ignore[arg-type]
                 spec=OrderSpec(models=["H100"], gpu_count=8, nodes=2, locality="leaf",
                                duration_hours=Decimal(12), name="gang-16"))
    order_create(actor=users["lotus-member"], tenant=tenants["lotus"],  # type: ignore[arg-type]
                 spec=OrderSpec(models=["A100"], gpu_count=1, gpu_milli=500,
                                duration_hours=Decimal(4), name="notebook"))
