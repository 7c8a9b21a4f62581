"""Every write of the fleet app (HackSoft style: keyword-only, atomic, audited).

The public entry points live here so callers import ``portal.fleet.services``; the code is
split by concern into the modules of this package.
"""

from portal.fleet.services.desired import (
    agent_for_node,
    fabric_desired_set,
    node_desired_set,
    simulate_apply,
    simulate_fabric_apply,
)
from portal.fleet.services.partitions import (
    index0_owners,
    partition_for_tenant,
    partition_map_entry,
    partition_release,
)

__all__ = [
    "agent_for_node",
    "fabric_desired_set",
    "index0_owners",
    "node_desired_set",
    "partition_for_tenant",
    "partition_map_entry",
    "partition_release",
    "simulate_apply",
    "simulate_fabric_apply",
]
