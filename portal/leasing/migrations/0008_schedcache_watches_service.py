"""The scheduler cache also watches the service lifecycle (``inventory_node.service``,
``inventory_gpu.service``): hardware leaving service must leave the cached snapshot."""

from django.db import migrations

WATCHED_ROWS = {
    "inventory_node": ("hostname", "state", "cpu_milli", "memory_mib", "shared_tenancy",
                       "leaf_id", "fabric_id", "service"),
    "inventory_gpu": ("node_id", "index", "model", "memory_mib", "nvlink_domain", "health",
                      "service"),
}
BEFORE = {
    "inventory_node": ("hostname", "state", "cpu_milli", "memory_mib", "shared_tenancy",
                       "leaf_id", "fabric_id"),
    "inventory_gpu": ("node_id", "index", "model", "memory_mib", "nvlink_domain", "health"),
}


def _sql(rows: dict) -> str:
    out = []
    for table, columns in rows.items():
        old = ", ".join(f'OLD."{c}"' for c in columns)
        new = ", ".join(f'NEW."{c}"' for c in columns)
        out.append(f"""
DROP TRIGGER IF EXISTS leasing_schedchange_upd ON {table};
CREATE TRIGGER leasing_schedchange_upd AFTER UPDATE ON {table} FOR EACH ROW
    WHEN (({old}) IS DISTINCT FROM ({new})) EXECUTE FUNCTION leasing_schedchange_note();""")
    return "\n".join(out)


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_sql(WATCHED_ROWS))


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_sql(BEFORE))


class Migration(migrations.Migration):
    dependencies = [("leasing", "0007_lease_healing"),
                    ("inventory", "0005_service_lifecycle")]
    operations = [migrations.RunPython(forwards, backwards)]
