"""A live stack of the PREVIOUS release's code (tests/upgrade/oldtree.py): its own
``manage.py migrate`` and seed, its uvicorn, Celery worker and beat — every process runs
from the old tree (``cwd`` and ``PYTHONPATH``), against a fresh database named like the
stack's (``<DATABASE_URL's name>_stack_…``). Only the harness (this process) is current."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.portal.leasing.stack import PYTHON, ROOT, Stack, StackConfig


class OldStack(Stack):
    def __init__(self, tree: Path, config: StackConfig | None = None) -> None:
        super().__init__(config)
        self.tree = tree

    def env(self, **extra: str) -> dict[str, str]:
        return super().env(**{"PYTHONPATH": str(self.tree), **extra})

    def _spawn(self, name: str, argv: list[str], env: dict[str, str],
               cwd: Path | None = None) -> subprocess.Popen[bytes]:
        return super()._spawn(name, argv, env, cwd=cwd or self.tree)

    def _seed(self) -> None:
        """The old tree's seed: its ``migrate`` (the old schema), then its rows."""
        c = self.config
        spec = {"nodes": c.nodes, "gpus_per_node": c.gpus_per_node,
                "nodes_per_leaf": c.nodes_per_leaf, "model": c.model, "tenants": c.tenants,
                "quota_gpus": c.quota_gpus, "max_pending": c.max_pending,
                "big_tenants": c.big_tenants}
        out = subprocess.run([PYTHON, "-m", "tests.portal.leasing.stack", "seed",
                              json.dumps(spec)], cwd=self.tree, env=self.env(),
                             capture_output=True, text=True, timeout=600, check=False)
        if out.returncode != 0:
            raise RuntimeError(f"old seed failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
        result = json.loads(out.stdout.strip().splitlines()[-1])
        self.keys, self.tenant_ids = result["keys"], result["tenant_ids"]

    def manage(self, tree: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """``manage.py <args>`` of ``tree`` (old or current) against this stack's database."""
        env = {**self.env(), "PYTHONPATH": str(tree)}
        return subprocess.run([PYTHON, "manage.py", *args], cwd=tree, env=env,
                              capture_output=True, text=True, timeout=timeout, check=False)


__all__ = ["ROOT", "OldStack"]
