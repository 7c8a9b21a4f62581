"""Every migration since the last release is expand-only (tests/upgrade/expand_only.py:
the rule; docs/operations.md: why), and the checker finds each kind of unsafe step."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

import pytest
from django.db import migrations, models
from django.db.migrations.loader import MigrationLoader

from tests.upgrade import expand_only, oldtree


def test_every_migration_since_the_release_is_expand_only() -> None:
    loader = MigrationLoader(None, ignore_no_migrations=True)
    assert expand_only.new_migrations(loader), "no migration since the release: check the leaves"
    findings = expand_only.check(loader)
    assert not findings, "\n".join(map(str, findings))


def test_released_leaves_are_the_release_commits() -> None:
    """RELEASED_LEAVES is what 3857d6b holds (git history; skipped without it)."""
    oldtree.require_history()
    names = subprocess.run(["git", "-C", str(oldtree.ROOT), "ls-tree", "-r", "--name-only",
                            oldtree.OLD_COMMIT, "portal"], capture_output=True, text=True,
                           check=True, timeout=60).stdout.split()
    leaves: dict[str, str] = {}
    for path in sorted(n for n in names if "/migrations/0" in n):
        app, _, file = path.removeprefix("portal/").split("/")
        leaves[app] = file.removesuffix(".py")
    assert leaves == expand_only.RELEASED_LEAVES


class _Loader(MigrationLoader):
    """The real graph plus one extra migration (its operations under test)."""

    def __init__(self, operations: Sequence[migrations.operations.base.Operation],
                 app: str = "leasing") -> None:
        self.probe_ops, self.probe_app = operations, app
        super().__init__(None, ignore_no_migrations=True)

    def load_disk(self) -> None:
        super().load_disk()
        app = self.probe_app
        parent = max(k for k in self.disk_migrations if k[0] == app)
        extra = type("Migration", (migrations.Migration,), {
            "dependencies": [parent], "operations": self.probe_ops})("9999_probe", app)
        self.disk_migrations[(app, "9999_probe")] = extra


@pytest.mark.parametrize(("operation", "problem"), [
    (migrations.AddField("lease", "probe", models.IntegerField(default=0)), "NOT NULL"),
    (migrations.AddField("lease", "probe", models.IntegerField(null=True, db_index=True)),
     "index built"),
    (migrations.RemoveField("lease", "name"), "contract step"),
    (migrations.RenameField("lease", "name", "title"), "contract step"),
    (migrations.AlterField("lease", "name", models.TextField(blank=True)), "type change"),
    (migrations.AddIndex("leaseevent", models.Index(fields=["created"], name="probe_idx")),
     "plain index"),
    (migrations.AddConstraint("allocation", models.CheckConstraint(
        condition=models.Q(slot__gte=0), name="probe_ck")), "ACCESS EXCLUSIVE"),
])
def test_checker_finds_unsafe_steps(operation: migrations.operations.base.Operation,
                                    problem: str) -> None:
    findings = expand_only.check(_Loader([operation]))
    probes = [f for f in findings if f.migration == "leasing.9999_probe"]
    assert probes and problem in probes[0].problem, findings


@pytest.mark.parametrize("operation", [
    migrations.AddField("lease", "probe", models.IntegerField(db_default=0, default=0)),
    migrations.AddField("lease", "probe", models.IntegerField(null=True)),
    migrations.AddField("quota", "probe", models.IntegerField(null=True, db_index=True)),
])
def test_checker_lets_expand_steps_through(operation: migrations.operations.base.Operation
                                           ) -> None:
    findings = expand_only.check(_Loader([operation]))
    assert not [f for f in findings if f.migration == "leasing.9999_probe"], findings


def test_checker_finds_two_tables_locked_in_one_transaction() -> None:
    ops = [migrations.AddField("quota", "probe", models.IntegerField(null=True)),
           migrations.AddField("lease", "probe", models.IntegerField(null=True))]
    findings = [f for f in expand_only.check(_Loader(ops)) if f.migration == "leasing.9999_probe"]
    assert len(findings) == 1 and "2 existing tables" in findings[0].problem, findings
