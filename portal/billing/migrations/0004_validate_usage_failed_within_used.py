"""Validate the constraint 0003 added NOT VALID: a scan under SHARE UPDATE EXCLUSIVE (reads
and writes of billing_usagerecord go on), in its own transaction. A no-op where the
constraint is already valid (a database that applied 0003 before it was split)."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0003_failed_hardware_and_sla'),
    ]

    operations = [
        migrations.RunSQL(
            'ALTER TABLE "billing_usagerecord" VALIDATE CONSTRAINT "usage_failed_within_used"',
            migrations.RunSQL.noop,
        ),
    ]
