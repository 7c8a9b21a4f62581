"""Row locks of the lease lifecycle, on a real PostgreSQL."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, transaction

from portal.leasing import services
from portal.leasing.lifecycle.pushing import lock as _lock
from portal.leasing.models import Lease
from tests.portal.leasing.test_lifecycle import order

pytestmark = [pytest.mark.services("postgres")]


def _other_connection(sql: str, params: list[Any]) -> str:
    """Run ``sql`` in a transaction of another connection; 'ok' or the error it raised."""
    outcome: list[str] = []

    def run() -> None:
        try:
            with transaction.atomic(), connection.cursor() as cur:
                cur.execute("SET LOCAL lock_timeout = '2s'")
                cur.execute(sql, params)
            outcome.append("ok")
        except Exception as exc:
            outcome.append(type(exc).__name__)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(10)
    return outcome[0] if outcome else "hung"


@pytest.mark.parametrize("lock", [_lock, lambda pk: services._locked(Lease(pk=pk))])
def test_lease_lock_leaves_the_tenant_row_alone(pool_tx: dict[str, Any], lock: Any) -> None:
    """Regression: locking a lease with ``select_related("tenant")`` locked the tenant row
    FOR UPDATE too, so a concurrent insert that references the tenant (an order, an audit
    record: FOR KEY SHARE) waited on it, and PostgreSQL found deadlocks in the race run."""
    lease = order(pool_tx)
    tenant_id = lease.tenant_id
    with transaction.atomic():
        assert lock(lease.pk) is not None
        # What an insert referencing the tenant takes, and what order_create takes.
        key_share = _other_connection(
            "SELECT 1 FROM tenants_tenant WHERE id = %s FOR KEY SHARE", [tenant_id])
        no_key = _other_connection(
            "SELECT 1 FROM tenants_tenant WHERE id = %s FOR NO KEY UPDATE", [tenant_id])
        # A row that references the lease can still be written (FOR NO KEY UPDATE).
        ref = _other_connection(
            "SELECT 1 FROM leasing_lease WHERE id = %s FOR KEY SHARE", [lease.pk])
        # ...while another locker of the lease still waits.
        locker = _other_connection(
            "SELECT 1 FROM leasing_lease WHERE id = %s FOR NO KEY UPDATE", [lease.pk])
    assert (key_share, no_key, ref) == ("ok", "ok", "ok")
    assert locker == "OperationalError"
