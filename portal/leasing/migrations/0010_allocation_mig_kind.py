"""MIG slices and whole/fractional slots never share a GPU at the same time (ADR 0222).

``Allocation.mig`` marks the slots that are a MIG instance's memory slices. On PostgreSQL
an exclusion constraint over (gpu, kind, period) among live allocations refuses a live MIG
slot and a live plain slot of one GPU with overlapping periods, whatever the Python checks
missed (allocation_no_overlap, 0002, already keeps two holders off one slot).
"""

from django.db import migrations, models

CREATE = """
CREATE EXTENSION IF NOT EXISTS btree_gist;
ALTER TABLE leasing_allocation ADD CONSTRAINT allocation_mig_apart
  EXCLUDE USING gist (gpu_id WITH =, mig WITH <>, tstzrange(start_at, end_at, '[)') WITH &&)
  WHERE (live);
"""
DROP = "ALTER TABLE leasing_allocation DROP CONSTRAINT IF EXISTS allocation_mig_apart;"


def forwards(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def backwards(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):

    dependencies = [
        ('leasing', '0009_mig'),
    ]

    operations = [
        migrations.AddField(
            model_name='allocation',
            name='mig',
            field=models.BooleanField(db_default=False, default=False, help_text='a memory slice of a MIG instance (ADR 0222): on PostgreSQL an exclusion constraint (migration 0010) keeps MIG and whole/fractional slots of one GPU from overlapping in time'),
        ),
        migrations.RunPython(forwards, backwards),
    ]
