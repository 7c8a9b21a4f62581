"""The expand-only rule for migrations (docs/operations.md, "Upgrades"), as code.

During a rolling upgrade the previous release's web and workers run on the new schema
(``migrate`` first, then web, then workers, then agents), so a migration of a release may
only *expand* what the previous release reads and writes:

1. no contract step — ``RemoveField``, ``DeleteModel``, ``RenameField``, ``RenameModel``,
   ``AlterModelTable``: old code still names the column/table (contract one release after
   the code stops using it, and say so in ``CONTRACT_OK`` below);
2. a column added to an existing table is nullable or has a database default
   (``db_default``): old code's INSERT does not name it; the same for ``AlterField`` that
   makes a column NOT NULL;
3. on the big tables (usage, lease events, allocations, leases, audit, agent reports and
   telemetry samples): no column type change (a table rewrite under ACCESS EXCLUSIVE), no
   plain index build (``AddIndexConcurrently``; a ``db_index``/``unique`` field added to a
   big table builds one), no ``AddConstraint`` (it scans the table under ACCESS EXCLUSIVE:
   ``ADD CONSTRAINT … NOT VALID`` then ``VALIDATE CONSTRAINT`` in a non-atomic migration,
   ``RunSQL`` with the state operation beside it).

4. one existing table altered per transaction: a migration that takes ACCESS EXCLUSIVE on
   two existing tables in one transaction deadlocks with running code that reads them in
   the other order (seen: tenants.0006 against the old API's key authentication) — split
   it, or ``atomic = False`` (each statement commits on its own; PostgreSQL).

Tables created by the new migrations themselves are exempt (no old code uses them);
``RunSQL``/``RunPython`` are trusted (data migrations: review them).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db import connection, migrations
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.operations.base import Operation
from django.db.migrations.state import ProjectState
from django.db.models import NOT_PROVIDED, Field

# The last release's leaf migration per app (3857d6b, tests/upgrade/oldtree.py).
RELEASED_LEAVES = {
    "billing": "0002_usage_gpu_util_avg",
    "core": "0002_auditlog_append_only",
    "fleet": "0004_w3_telemetry_verbose_names",
    "inventory": "0004_node_hostname_any_case",
    "leasing": "0006_leasebook_changelog",
    "tenants": "0005_membership_invitations",
}
BIG_TABLES = {
    ("billing", "usagerecord"), ("leasing", "leaseevent"), ("leasing", "allocation"),
    ("leasing", "lease"), ("leasing", "idempotencykey"), ("core", "auditlog"),
    ("fleet", "agentreport"), ("fleet", "gputelemetry"), ("fleet", "porttelemetry"),
    ("fleet", "telemetrysample"),
}
CONTRACT = (migrations.RemoveField, migrations.DeleteModel, migrations.RenameField,
            migrations.RenameModel, migrations.AlterModelTable)
# operations that take ACCESS EXCLUSIVE on their (existing) table
LOCKING = (migrations.AddField, migrations.AlterField, migrations.RemoveField,
           migrations.RenameField, migrations.AddIndex, migrations.AddConstraint,
           migrations.RemoveConstraint, migrations.RemoveIndex)
# (app, migration, operation description) -> why this contract step is safe now
CONTRACT_OK: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Finding:
    migration: str
    operation: str
    problem: str

    def __str__(self) -> str:
        return f"{self.migration}: {self.operation}: {self.problem}"


def portal_apps() -> set[str]:
    from django.apps import apps

    return {a.label for a in apps.get_app_configs() if a.name.startswith("portal.")}


def new_migrations(loader: MigrationLoader) -> list[tuple[str, str]]:
    """Our apps' migrations after the last release, in plan order."""
    released: set[tuple[str, str]] = set()
    for app, leaf in RELEASED_LEAVES.items():
        released |= set(loader.graph.forwards_plan((app, leaf)))
    ours = portal_apps()
    plan: list[tuple[str, str]] = []
    for leaf in loader.graph.leaf_nodes():
        plan += [k for k in loader.graph.forwards_plan(leaf) if k not in plan]
    return [k for k in plan if k[0] in ours and k not in released]


def _db_ops(ops: Iterable[Operation]) -> Iterable[Operation]:
    for op in ops:
        if isinstance(op, migrations.SeparateDatabaseAndState):
            yield from _db_ops(op.database_operations)
        else:
            yield op


def _has_default(field: Field) -> bool:  # type: ignore[type-arg]
    return bool(field.null or field.db_default is not NOT_PROVIDED or field.many_to_many)


def check(loader: MigrationLoader | None = None) -> list[Finding]:
    loader = loader or MigrationLoader(None, ignore_no_migrations=True)
    found: list[Finding] = []
    created: set[tuple[str, str]] = set()
    for key in new_migrations(loader):
        migration = loader.get_migration(*key)
        app, name = key
        state: ProjectState = loader.project_state(
            [p.key for p in loader.graph.node_map[key].parents], at_end=True)
        locked: set[tuple[str, str]] = set()
        for op in _db_ops(migration.operations):
            found += _check_op(app, f"{app}.{name}", op, state, created)
            model = getattr(op, "model_name_lower", None)
            if isinstance(op, LOCKING) and model and (app, model) not in created:
                locked.add((app, model))
            op.state_forwards(app, state)
        if migration.atomic and len(locked) > 1:
            found.append(Finding(f"{app}.{name}", "the migration", (
                f"ACCESS EXCLUSIVE on {len(locked)} existing tables "
                f"({', '.join(sorted(m for _, m in locked))}) in one transaction: deadlocks "
                "with running code (atomic = False, or one table per migration)")))
    return found


def _check_op(app: str, where: str, op: Operation, state: ProjectState,
              created: set[tuple[str, str]]) -> list[Finding]:
    desc = op.describe()
    model = getattr(op, "model_name_lower", None) or getattr(op, "name_lower", None)
    table = (app, str(model))
    if isinstance(op, migrations.CreateModel):
        created.add((app, op.name_lower))
        return []
    if table in created:
        return []
    if isinstance(op, CONTRACT):
        if (app, desc) in CONTRACT_OK:
            return []
        return [Finding(where, desc, "contract step: old code still uses it")]
    big = table in BIG_TABLES
    out: list[Finding] = []
    if isinstance(op, migrations.AddField):
        field = op.field
        if not _has_default(field):
            out.append(Finding(where, desc, "NOT NULL column without db_default: the old "
                               "code's INSERT fails"))
        if big and (getattr(field, "db_index", False) or field.unique):
            out.append(Finding(where, desc, "index built under lock on a big table"))
    elif isinstance(op, migrations.AlterField):
        before = state.models[app, op.model_name_lower].fields.get(op.name)
        field = op.field
        if before is not None and before.null and not _has_default(field):
            out.append(Finding(where, desc, "made NOT NULL without db_default"))
        if big and before is not None and (before.db_parameters(connection)["type"]
                                           != field.db_parameters(connection)["type"]):
            out.append(Finding(where, desc, "column type change rewrites a big table"))
    elif big and isinstance(op, migrations.AddIndex) and not _concurrent(op):
        out.append(Finding(where, desc, "plain index build on a big table "
                           "(AddIndexConcurrently)"))
    elif big and isinstance(op, migrations.AddConstraint):
        out.append(Finding(where, desc, "constraint validated under ACCESS EXCLUSIVE on a big "
                           "table (NOT VALID, then VALIDATE CONSTRAINT)"))
    return out


def _concurrent(op: Operation) -> bool:
    return type(op).__name__ == "AddIndexConcurrently"
