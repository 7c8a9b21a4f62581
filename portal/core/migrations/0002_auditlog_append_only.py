"""On PostgreSQL, a trigger refuses UPDATE and DELETE on the audit log (append-only)."""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION gpupool_audit_append_only() RETURNS trigger AS $$
BEGIN
  -- Deleting a user or tenant may null its foreign key (ON DELETE SET NULL); nothing else.
  IF TG_OP = 'DELETE' OR
     (NEW.id, NEW.created, NEW.action, NEW.actor_repr, NEW.object_type, NEW.object_id,
      NEW.object_repr, NEW.changes::text, NEW.ip, NEW.user_agent, NEW.via)
     IS DISTINCT FROM
     (OLD.id, OLD.created, OLD.action, OLD.actor_repr, OLD.object_type, OLD.object_id,
      OLD.object_repr, OLD.changes::text, OLD.ip, OLD.user_agent, OLD.via) THEN
    RAISE EXCEPTION 'core_auditlog is append-only';
  END IF;
  RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER core_auditlog_append_only BEFORE UPDATE OR DELETE ON core_auditlog
  FOR EACH ROW EXECUTE FUNCTION gpupool_audit_append_only();
"""
DROP = """
DROP TRIGGER IF EXISTS core_auditlog_append_only ON core_auditlog;
DROP FUNCTION IF EXISTS gpupool_audit_append_only();
"""


def forwards(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def backwards(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("core", "0001_initial")]
    operations = [migrations.RunPython(forwards, backwards)]
