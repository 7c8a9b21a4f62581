"""Fill ``Gpu.mig_reported_split`` from each node's stored observed state (what its agent
last reported), so a GPU still split when this release is deployed is known at once, not
only after its agent's next change (ADR 0244). Data only, in a transaction of its own."""

from typing import Any

from django.db import migrations

from portal.leasing.migdevices import split_in


def forwards(apps: Any, schema_editor: Any) -> None:
    observed = apps.get_model("fleet", "NodeObservedState")
    gpu = apps.get_model("inventory", "Gpu")
    for node_id, document in observed.objects.filter(document__has_key="mig").values_list(
            "node_id", "document").iterator():
        split = split_in(document)
        if split:
            gpu.objects.filter(node_id=node_id, index__in=split).update(
                mig_reported_split=True)


class Migration(migrations.Migration):

    dependencies = [
        ('leasing', '0010_allocation_mig_kind'),
        ('inventory', '0008_gpu_mig_reported_split'),
        ('fleet', '0005_service_events_and_validation'),
    ]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
