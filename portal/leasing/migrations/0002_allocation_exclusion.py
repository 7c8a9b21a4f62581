"""PostgreSQL backstop: no GPU slot is ever held by two live allocations at once.

An exclusion constraint over (gpu, slot, period) among live allocations; two racing
writers cannot both commit an overlapping allocation. (SQLite, used by the demo only,
serialises writers instead.)
"""

from django.db import migrations

CREATE = """
CREATE EXTENSION IF NOT EXISTS btree_gist;
ALTER TABLE leasing_allocation ADD CONSTRAINT allocation_no_overlap
  EXCLUDE USING gist (gpu_id WITH =, slot WITH =, tstzrange(start_at, end_at, '[)') WITH &&)
  WHERE (live);
"""
DROP = "ALTER TABLE leasing_allocation DROP CONSTRAINT IF EXISTS allocation_no_overlap;"


def forwards(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def backwards(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("leasing", "0001_initial")]
    operations = [migrations.RunPython(forwards, backwards)]
