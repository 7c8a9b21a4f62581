"""The scheduler cache's change log and the fair-share running totals (ADR 0125).

PostgreSQL only (the demo's SQLite keeps reading everything each pass): raw tables kept
by triggers, so a change made by any process, raw SQL included, is seen.

- ``leasing_schedchange``: one row per change of what the scheduler cache holds (nodes,
  GPUs, HCA ports, switches, links, quotas, tenant slugs), stamped with the writing
  transaction's id; a cache built when the oldest running transaction was X is stale as
  soon as a row with ``xid >= X`` exists (``portal.leasing.schedcache``).
- ``leasing_tenantusage``: per tenant, the fair-share usage of every *ended* lease
  (GPU-seconds, halved every ``half_life_s`` since it ended), folded to ``at_s`` (epoch
  seconds). A trigger on ``leasing_lease`` folds a lease in when it gets both
  ``active_at`` and ``ended_at`` and takes it out again if either changes or it is
  deleted (``portal.leasing.usage``).
"""

from django.db import migrations

HALF_LIFE_S = 7 * 24 * 3600  # scheduler.model.DEFAULT_HALF_LIFE_S (portal.leasing.usage)

WATCHED_ROWS = {  # table -> the columns the scheduler cache reads
    "inventory_node": ("hostname", "state", "cpu_milli", "memory_mib", "shared_tenancy",
                       "leaf_id", "fabric_id"),
    "inventory_gpu": ("node_id", "index", "model", "memory_mib", "nvlink_domain", "health"),
    "inventory_hcaport": ("node_id", "switch_id"),
    "inventory_switch": ("guid",),
    "tenants_tenant": ("slug",),
}
WATCHED_STATEMENTS = ("inventory_switchlink", "leasing_quota")

TABLES = f"""
CREATE TABLE IF NOT EXISTS leasing_schedchange (
    id bigserial PRIMARY KEY,
    xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
    created timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS leasing_schedchange_xid ON leasing_schedchange (xid);
CREATE TABLE IF NOT EXISTS leasing_tenantusage (
    tenant_id uuid PRIMARY KEY,
    gpu_seconds double precision NOT NULL,
    at_s bigint NOT NULL,
    half_life_s bigint NOT NULL DEFAULT {HALF_LIFE_S}
);
CREATE INDEX IF NOT EXISTS leasing_lease_running ON leasing_lease (tenant_id)
    WHERE active_at IS NOT NULL AND ended_at IS NULL;
CREATE OR REPLACE FUNCTION leasing_schedchange_note() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO leasing_schedchange DEFAULT VALUES;
    RETURN NULL;
END $$;
"""

# Add GPU-seconds ``c`` that ended at ``e`` (epoch s) to a tenant's running total; a
# negative ``c`` takes an earlier contribution out again.
USAGE = f"""
CREATE OR REPLACE FUNCTION leasing_usage_add(tenant uuid, c double precision, e bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF c = 0 THEN RETURN; END IF;
    INSERT INTO leasing_tenantusage AS t (tenant_id, gpu_seconds, at_s)
    VALUES (tenant, c, e)
    ON CONFLICT (tenant_id) DO UPDATE SET
        gpu_seconds = CASE WHEN EXCLUDED.at_s >= t.at_s
            THEN t.gpu_seconds * power(0.5, (EXCLUDED.at_s - t.at_s)::float8 / t.half_life_s)
                 + EXCLUDED.gpu_seconds
            ELSE t.gpu_seconds
                 + EXCLUDED.gpu_seconds
                   * power(0.5, (t.at_s - EXCLUDED.at_s)::float8 / t.half_life_s) END,
        at_s = greatest(t.at_s, EXCLUDED.at_s);
END $$;
CREATE OR REPLACE FUNCTION leasing_usage_of(l leasing_lease) RETURNS double precision
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN l.active_at IS NULL OR l.ended_at IS NULL THEN 0::float8
        ELSE greatest(extract(epoch FROM l.ended_at - l.active_at)::float8, 0)
             * l.gpu_count * l.nodes * l.gpu_milli / 1000.0 END
$$;
CREATE OR REPLACE FUNCTION leasing_usage_fold() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM leasing_usage_add(OLD.tenant_id, -leasing_usage_of(OLD),
                                  floor(extract(epoch FROM OLD.ended_at))::bigint);
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') THEN
        PERFORM leasing_usage_add(NEW.tenant_id, leasing_usage_of(NEW),
                                  floor(extract(epoch FROM NEW.ended_at))::bigint);
    END IF;
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION leasing_usage_clear() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM leasing_tenantusage;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS leasing_usage_ins ON leasing_lease;
CREATE TRIGGER leasing_usage_ins AFTER INSERT ON leasing_lease FOR EACH ROW
    WHEN (NEW.active_at IS NOT NULL AND NEW.ended_at IS NOT NULL)
    EXECUTE FUNCTION leasing_usage_fold();
DROP TRIGGER IF EXISTS leasing_usage_upd ON leasing_lease;
CREATE TRIGGER leasing_usage_upd AFTER UPDATE ON leasing_lease FOR EACH ROW
    WHEN ((OLD.active_at, OLD.ended_at, OLD.gpu_count, OLD.nodes, OLD.gpu_milli,
           OLD.tenant_id)
          IS DISTINCT FROM (NEW.active_at, NEW.ended_at, NEW.gpu_count, NEW.nodes,
                            NEW.gpu_milli, NEW.tenant_id))
    EXECUTE FUNCTION leasing_usage_fold();
DROP TRIGGER IF EXISTS leasing_usage_del ON leasing_lease;
CREATE TRIGGER leasing_usage_del AFTER DELETE ON leasing_lease FOR EACH ROW
    WHEN (OLD.active_at IS NOT NULL AND OLD.ended_at IS NOT NULL)
    EXECUTE FUNCTION leasing_usage_fold();
DROP TRIGGER IF EXISTS leasing_usage_trunc ON leasing_lease;
CREATE TRIGGER leasing_usage_trunc AFTER TRUNCATE ON leasing_lease
    FOR EACH STATEMENT EXECUTE FUNCTION leasing_usage_clear();
DROP TRIGGER IF EXISTS leasing_usage_trunc ON tenants_tenant;
CREATE TRIGGER leasing_usage_trunc AFTER TRUNCATE ON tenants_tenant
    FOR EACH STATEMENT EXECUTE FUNCTION leasing_usage_clear();
"""

# The history as it is when the migration runs, folded once (later: the trigger).
BACKFILL = """
SELECT leasing_usage_add(l.tenant_id, leasing_usage_of(l),
                         floor(extract(epoch FROM l.ended_at))::bigint)
FROM leasing_lease l WHERE l.active_at IS NOT NULL AND l.ended_at IS NOT NULL
ORDER BY l.ended_at;
"""


def _watch_sql() -> str:
    out = []
    for table, columns in WATCHED_ROWS.items():
        old = ", ".join(f'OLD."{c}"' for c in columns)
        new = ", ".join(f'NEW."{c}"' for c in columns)
        out.append(f"""
DROP TRIGGER IF EXISTS leasing_schedchange_upd ON {table};
CREATE TRIGGER leasing_schedchange_upd AFTER UPDATE ON {table} FOR EACH ROW
    WHEN (({old}) IS DISTINCT FROM ({new})) EXECUTE FUNCTION leasing_schedchange_note();
DROP TRIGGER IF EXISTS leasing_schedchange_ins ON {table};
CREATE TRIGGER leasing_schedchange_ins AFTER INSERT OR DELETE OR TRUNCATE ON {table}
    FOR EACH STATEMENT EXECUTE FUNCTION leasing_schedchange_note();""")
    for table in WATCHED_STATEMENTS:
        out.append(f"""
DROP TRIGGER IF EXISTS leasing_schedchange_ins ON {table};
CREATE TRIGGER leasing_schedchange_ins AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE
    ON {table} FOR EACH STATEMENT EXECUTE FUNCTION leasing_schedchange_note();""")
    return "\n".join(out)


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for sql in (TABLES, USAGE, _watch_sql(), BACKFILL):
        schema_editor.execute(sql)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    drops = [f"DROP TRIGGER IF EXISTS leasing_schedchange_upd ON {t};"
             f"DROP TRIGGER IF EXISTS leasing_schedchange_ins ON {t};"
             for t in (*WATCHED_ROWS, *WATCHED_STATEMENTS)]
    drops += [f"DROP TRIGGER IF EXISTS {n} ON leasing_lease;"
              for n in ("leasing_usage_ins", "leasing_usage_upd", "leasing_usage_del",
                        "leasing_usage_trunc")]
    drops.append("DROP TRIGGER IF EXISTS leasing_usage_trunc ON tenants_tenant;")
    drops.append("DROP FUNCTION IF EXISTS leasing_usage_fold, leasing_usage_clear, "
                 "leasing_usage_add, leasing_usage_of, leasing_schedchange_note;"
                 "DROP INDEX IF EXISTS leasing_lease_running;"
                 "DROP TABLE IF EXISTS leasing_schedchange, leasing_tenantusage;")
    schema_editor.execute("\n".join(drops))


class Migration(migrations.Migration):

    dependencies = [
        ("leasing", "0004_lifecycle_notice_state"),
        ("inventory", "0003_storage_endpoints"),
        ("tenants", "0005_membership_invitations"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
