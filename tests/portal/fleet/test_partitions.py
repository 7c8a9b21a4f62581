from __future__ import annotations

from datetime import timedelta

import pytest

from portal.core import clock
from portal.core.errors import Conflict
from portal.fleet import services
from portal.fleet.models import PortTelemetry, TenantPartition
from tests.portal.factories import make_tenant
from tests.portal.fleet.helpers import make_node


@pytest.fixture(autouse=True)
def _clock():
    yield
    clock.reset()


@pytest.mark.django_db
def test_unique_key_per_tenant_allocated_once(settings) -> None:
    settings.GPUPOOL_PKEY_RANGE = (0x0100, 0x0102)
    a, b = make_tenant("acme"), make_tenant("beta")
    pa = services.partition_for_tenant(tenant=a)
    assert services.partition_for_tenant(tenant=a).pk == pa.pk
    pb = services.partition_for_tenant(tenant=b)
    assert {pa.pkey, pb.pkey} == {0x0100, 0x0101}


@pytest.mark.django_db
def test_key_held_by_a_port_is_skipped(settings) -> None:
    settings.GPUPOOL_PKEY_RANGE = (0x0100, 0x0102)
    node = make_node()
    PortTelemetry.objects.create(node=node, device="mlx5_0", port=1, ts=clock.now(),
                                 data={"pkeys": ["0xffff", "0x8100"]})
    assert services.partition_for_tenant(tenant=make_tenant("acme")).pkey == 0x0101


@pytest.mark.django_db
def test_quarantine_before_reuse(settings) -> None:
    settings.GPUPOOL_PKEY_RANGE = (0x0100, 0x0100)
    settings.GPUPOOL_PKEY_QUARANTINE_HOURS = 24
    clock.freeze(clock.now())
    a, b = make_tenant("acme"), make_tenant("beta")
    pa = services.partition_for_tenant(tenant=a)
    released = services.partition_release(tenant=a)
    assert released is not None and released.state == TenantPartition.State.QUARANTINED
    with pytest.raises(Conflict):
        services.partition_for_tenant(tenant=b)
    clock.advance(timedelta(hours=25))
    pb = services.partition_for_tenant(tenant=b)
    assert pb.pkey == pa.pkey and pb.tenant == b


@pytest.mark.django_db
def test_quarantined_key_still_on_a_port_is_not_reused(settings) -> None:
    settings.GPUPOOL_PKEY_RANGE = (0x0100, 0x0100)
    clock.freeze(clock.now())
    a = make_tenant("acme")
    services.partition_for_tenant(tenant=a)
    services.partition_release(tenant=a)
    PortTelemetry.objects.create(node=make_node(), device="mlx5_0", port=1, ts=clock.now(),
                                 data={"pkeys": ["0x8100"]})
    clock.advance(timedelta(hours=48))
    with pytest.raises(Conflict):
        services.partition_for_tenant(tenant=make_tenant("beta"))
