from __future__ import annotations

import json
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.core.errors import ApplicationError
from portal.inventory.generator import ClusterSpec, cluster_generate


class Command(BaseCommand):
    help = "Generate a synthetic fat-tree GPU cluster (nodes under leaves under spines)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--nodes", type=int, required=True)
        parser.add_argument("--gpus-per-node", type=int, default=8)
        parser.add_argument("--nodes-per-leaf", type=int, default=16)
        parser.add_argument("--spines", type=int, default=2)
        parser.add_argument("--model", default="H100")
        parser.add_argument("--prefix", default="gpu-node")
        parser.add_argument("--fabric", default="fabric-1")
        parser.add_argument("--hcas-per-node", type=int, default=1)
        parser.add_argument("--nvlink", default="", choices=["", "all", "pairs", "none"])
        parser.add_argument("--start", type=int, default=1, help="first node number")

    def handle(self, *args: Any, **o: Any) -> None:
        spec = ClusterSpec(nodes=o["nodes"], gpus_per_node=o["gpus_per_node"],
                           nodes_per_leaf=o["nodes_per_leaf"], spines=o["spines"],
                           model=o["model"], prefix=o["prefix"], fabric=o["fabric"],
                           hcas_per_node=o["hcas_per_node"], nvlink=o["nvlink"],
                           start=o["start"])
        began = time.perf_counter()
        try:
            counts = cluster_generate(actor=None, spec=spec)
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        counts_s = json.dumps(counts, sort_keys=True)
        self.stdout.write(f"{counts_s} in {time.perf_counter() - began:.2f}s")
