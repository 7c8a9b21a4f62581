"""The lease book's change log (ADR 0165).

PostgreSQL only (the demo's SQLite reads every held lease each pass): ``leasing_leasechange``
gets one row per lease whose live allocations or scheduling fields changed, stamped with
the writing transaction's id, whoever wrote it (another process, raw SQL, a bulk update).
A worker's lease book re-reads only the leases named by rows its last read could not see
(``portal.leasing.schedcache.LeaseBook``). A row without a lease (``TRUNCATE``) makes every
book read everything again.

Allocation changes are noted per statement from its transition table (placing one 8-GPU
lease writes 64 slot rows and notes one lease); lease rows per row, only when a field the
scheduler reads changed.
"""

from django.db import migrations

LEASE_FIELDS = ("tenant_id", "priority", "start_at", "end_at", "borrowed", "gpu_model",
                "state", "created")

TABLE = """
CREATE TABLE IF NOT EXISTS leasing_leasechange (
    id bigserial PRIMARY KEY,
    xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
    lease_id uuid,
    created timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS leasing_leasechange_xid ON leasing_leasechange (xid);
"""

FUNCTIONS = """
CREATE OR REPLACE FUNCTION leasing_leasechange_new() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO leasing_leasechange (lease_id) SELECT DISTINCT lease_id FROM new_rows;
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION leasing_leasechange_old() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO leasing_leasechange (lease_id) SELECT DISTINCT lease_id FROM old_rows;
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION leasing_leasechange_both() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO leasing_leasechange (lease_id)
        SELECT lease_id FROM new_rows UNION SELECT lease_id FROM old_rows;
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION leasing_leasechange_row() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO leasing_leasechange (lease_id) VALUES (NEW.id);
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION leasing_leasechange_all() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO leasing_leasechange (lease_id) VALUES (NULL);
    RETURN NULL;
END $$;
"""


def _triggers() -> str:
    old = ", ".join(f'OLD."{c}"' for c in LEASE_FIELDS)
    new = ", ".join(f'NEW."{c}"' for c in LEASE_FIELDS)
    return f"""
CREATE TRIGGER leasing_leasechange_ins AFTER INSERT ON leasing_allocation
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION leasing_leasechange_new();
CREATE TRIGGER leasing_leasechange_del AFTER DELETE ON leasing_allocation
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION leasing_leasechange_old();
CREATE TRIGGER leasing_leasechange_upd AFTER UPDATE ON leasing_allocation
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION leasing_leasechange_both();
CREATE TRIGGER leasing_leasechange_trunc AFTER TRUNCATE ON leasing_allocation
    FOR EACH STATEMENT EXECUTE FUNCTION leasing_leasechange_all();
CREATE TRIGGER leasing_leasechange_lease AFTER UPDATE ON leasing_lease FOR EACH ROW
    WHEN (({old}) IS DISTINCT FROM ({new}))
    EXECUTE FUNCTION leasing_leasechange_row();
CREATE TRIGGER leasing_leasechange_trunc AFTER TRUNCATE ON leasing_lease
    FOR EACH STATEMENT EXECUTE FUNCTION leasing_leasechange_all();
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for sql in (TABLE, FUNCTIONS, _triggers()):
        schema_editor.execute(sql)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    drops = [f"DROP TRIGGER IF EXISTS leasing_leasechange_{n} ON leasing_allocation;"
             for n in ("ins", "del", "upd", "trunc")]
    drops += ["DROP TRIGGER IF EXISTS leasing_leasechange_lease ON leasing_lease;",
              "DROP TRIGGER IF EXISTS leasing_leasechange_trunc ON leasing_lease;",
              "DROP FUNCTION IF EXISTS leasing_leasechange_new, leasing_leasechange_old, "
              "leasing_leasechange_both, leasing_leasechange_row, leasing_leasechange_all;",
              "DROP TABLE IF EXISTS leasing_leasechange;"]
    schema_editor.execute("\n".join(drops))


class Migration(migrations.Migration):

    dependencies = [("leasing", "0005_passscale_schedcache")]

    operations = [migrations.RunPython(forwards, backwards)]
