"""Seed data for the demo: a small cluster, two tenants, fixed logins (listed in README)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings
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


# --- the demo's console (issue 13, finding 10: ~200 lines a minute buried the URL) -------
QUIET_LOGGERS = ("celery", "kombu", "amqp", "uvicorn.access", "uvicorn.error")


def configure_output(*, verbose: bool, mail_dir: Path) -> None:
    """gpupool logs at INFO; Celery, the server's access log and e-mails stay at WARNING
    unless ``verbose``: mails go to files in ``mail_dir`` instead of the console."""
    logging.getLogger("portal").setLevel(logging.INFO)
    if verbose:
        return
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    mail_dir.mkdir(parents=True, exist_ok=True)
    settings.EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    settings.EMAIL_FILE_PATH = str(mail_dir)


def banner(url: str, mail_dir: Path | None) -> str:
    logins = ", ".join(u for u, _, _ in DEMO_USERS)
    lines = [f"  gpupool demo: {url}", f"  console:      {url}console/  (operator)",
             f"  API docs:     {url}api/docs/",
             f"  logins:       {logins} (password: {DEMO_PASSWORD})"]
    if mail_dir is not None:
        lines.append(f"  e-mails:      written to {mail_dir}/ (--verbose prints them)")
    return "\n" + "\n".join(lines) + "\n"


def announce_when_started(server: Any, write: Callable[[str], Any], text: str,
                          timeout_s: float = 60.0) -> threading.Thread:
    """Write ``text`` once ``server.started`` (uvicorn's flag) is true: the banner comes
    after the server's own start-up lines, as the last thing on the console."""

    def wait() -> None:
        deadline = time.monotonic() + timeout_s
        while not getattr(server, "started", False) and time.monotonic() < deadline:
            time.sleep(0.05)
        write(text)

    thread = threading.Thread(target=wait, name="demo-banner", daemon=True)
    thread.start()
    return thread
