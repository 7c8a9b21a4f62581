"""Benchmark: how long `generate_cluster --nodes N` takes on a fresh database.

    python -m tests.bench.generate_cluster [--nodes 2000]

Uses DATABASE_URL when set (e.g. PostgreSQL), else a temporary SQLite file.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GPUPOOL_DATA_DIR": tmp}
        if not os.environ.get("DATABASE_URL"):
            env["DATABASE_URL"] = f"sqlite:///{tmp}/bench.sqlite3"
        manage = [sys.executable, str(ROOT / "manage.py")]
        subprocess.run([*manage, "migrate", "-v0"], env=env, check=True)
        began = time.perf_counter()
        out = subprocess.run([*manage, "generate_cluster", "--nodes", str(args.nodes),
                              "--prefix", f"bench{os.getpid()}"], env=env, check=True,
                             capture_output=True, text=True).stdout.strip()
        elapsed = time.perf_counter() - began
    print(f"generate_cluster --nodes {args.nodes}: {elapsed:.2f} s wall (incl. Django start) "
          f"on {env['DATABASE_URL'].split(':')[0]} — {out}")


if __name__ == "__main__":
    main()
