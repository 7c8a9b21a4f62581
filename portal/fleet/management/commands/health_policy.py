from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from portal.fleet.policy import PolicyError, PolicyTable, load_file
from portal.fleet.policy.loader import effective_table

COLUMNS = ("key", "severity", "action", "scope", "fence", "params", "source", "cause")


def _sort_key(key: str) -> tuple[str, int, str]:
    head, _, tail = key.partition(".")
    return (head, int(tail) if tail.isdigit() else 10**9, tail)


def _params(params: Any) -> str:
    return ",".join(f"{k}={v:g}" for k, v in params.items()) or "-"


def render_table(table: PolicyTable) -> str:
    rows = [rule.as_dict() for _, rule in sorted(table.rules.items(),
                                                 key=lambda kv: _sort_key(kv[0]))]
    lines = [f"# health policy: {table.source}",
             f"# guards: flap {table.guards.flap}, breaker {table.guards.breaker}, "
             f"retry {table.guards.retry}", "\t".join(COLUMNS)]
    for row in rows:
        row["fence"] = "yes" if row["fence"] else "no"
        row["params"] = _params(row["params"])
        lines.append("\t".join(str(row[c]) for c in COLUMNS))
    return "\n".join(lines)


def render_json(table: PolicyTable) -> str:
    guards = {name: vars(getattr(table.guards, name)) for name in ("flap", "breaker", "retry")}
    rules = {key: table.rules[key].as_dict() for key in sorted(table.rules, key=_sort_key)}
    return json.dumps({"source": table.source, "guards": guards, "rules": rules}, indent=2)


class Command(BaseCommand):
    help = ("Print the effective health policy (defaults + GPUPOOL_HEALTH_POLICY), or "
            "validate a policy file: health_policy [--format table|json] [--check FILE]")

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--format", choices=["table", "json"], default="table")
        parser.add_argument("--check", metavar="FILE",
                            help="validate FILE (exit 1 and the problem when it is bad)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["check"]:
                table = load_file(options["check"])
                changed = sum(1 for r in table.rules.values() if r.source == "site")
                self.stdout.write(f"ok: {options['check']} ({changed} rules overridden)")
                return
            table = effective_table()
        except PolicyError as exc:
            raise CommandError(f"health policy refused: {exc}") from exc
        render = render_json if options["format"] == "json" else render_table
        self.stdout.write(render(table))
