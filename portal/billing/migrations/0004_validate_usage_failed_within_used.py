"""Validate the constraint 0003 added NOT VALID: a scan under SHARE UPDATE EXCLUSIVE (reads
and writes of billing_usagerecord go on), in its own transaction. A no-op where the
constraint is already valid (a database that applied 0003 before it was split)."""

from django.db import migrations


def _validate(apps, schema_editor):
    if schema_editor.connection.vendor == 'postgresql':  # elsewhere 0003 added it valid
        schema_editor.execute('ALTER TABLE "billing_usagerecord" '
                              'VALIDATE CONSTRAINT "usage_failed_within_used"')


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0003_failed_hardware_and_sla'),
    ]

    operations = [migrations.RunPython(_validate, migrations.RunPython.noop)]
