"""The ``MIG-…`` UUIDs of the lease's instances, as the nodes' agents report them (ADR 0222).

An agent reports per managed GPU the instances it holds (``observed["mig"]``: profile,
start slot, GPU instance id, UUID). Each report that changes the node's observed state
records the UUIDs on the matching live ``MigInstance`` rows (same GPU, start and
profile); a MIG lease becomes ACTIVE only once every instance of it has one. The same
report keeps each GPU's ``mig_reported_split`` (MIG still on there) for the scheduling
pass (ADR 0244)."""

from __future__ import annotations

from typing import Any

from portal.fleet.models import NodeObservedState
from portal.inventory.models import Gpu
from portal.leasing.models import Lease, MigInstance


def _reported(node_id: int) -> dict[tuple[int, int, str], dict[str, Any]]:
    row = NodeObservedState.objects.filter(node_id=node_id).only("document").first()
    out: dict[tuple[int, int, str], dict[str, Any]] = {}
    for gpu in (row.document.get("mig") or []) if row else []:
        if not isinstance(gpu, dict) or not isinstance(gpu.get("gpu_index"), int):
            continue
        for inst in gpu.get("instances") or []:
            if isinstance(inst, dict) and isinstance(inst.get("start"), int) \
                    and isinstance(inst.get("uuid"), str) and inst["uuid"].startswith("MIG-"):
                out[(gpu["gpu_index"], inst["start"], str(inst.get("profile")))] = inst
    return out


def record_uuids(node_id: int) -> int:
    """Store the reported UUIDs on the node's live instances; how many changed."""
    reported = _reported(node_id)
    changed = 0
    for inst in MigInstance.objects.filter(gpu__node_id=node_id, allocation__live=True
                                           ).select_related("gpu"):
        seen = reported.get((inst.gpu.index, inst.start, inst.profile))
        uuid = seen["uuid"][:64] if seen else ""
        gi = seen.get("gpu_instance_id") if seen else None
        gi = gi if isinstance(gi, int) and not isinstance(gi, bool) and 0 <= gi < 2**31 else None
        if (inst.uuid, inst.gpu_instance_id) != (uuid, gi):
            inst.uuid, inst.gpu_instance_id = uuid, gi
            inst.save(update_fields=["uuid", "gpu_instance_id"])
            changed += 1
    return changed


def pending_reset(node_ids: set[int]) -> set[tuple[int, int]]:
    """(node id, GPU index) of each GPU whose agent reports its MIG mode change waiting for
    a GPU reset (``mode: pending_reset``): no instance is made there until it is reset."""
    out: set[tuple[int, int]] = set()
    for node_id, document in NodeObservedState.objects.filter(
            node_id__in=node_ids).values_list("node_id", "document"):
        for gpu in (document or {}).get("mig") or []:
            if isinstance(gpu, dict) and isinstance(gpu.get("gpu_index"), int) \
                    and gpu.get("mode") == "pending_reset":
                out.add((node_id, gpu["gpu_index"]))
    return out


def split_in(document: Any) -> set[int]:
    """Indices of the GPUs an observed document reports under MIG (mode enabled or
    pending_reset, or holding instances): the one definition of "still split"."""
    reported = document.get("mig") if isinstance(document, dict) else None
    out: set[int] = set()
    for gpu in reported if isinstance(reported, list) else []:
        if isinstance(gpu, dict) and isinstance(gpu.get("gpu_index"), int) and (
                gpu.get("mode") in ("enabled", "pending_reset") or gpu.get("instances")):
            out.add(gpu["gpu_index"])
    return out


def still_split(node_id: int) -> set[int]:
    """Indices of the node's GPUs its agent still reports under MIG (mode enabled or
    pending_reset, or holding instances). An agent reports only the GPUs it is told to
    manage, so a GPU switched to whole stays here until the agent has turned MIG off."""
    row = NodeObservedState.objects.filter(node_id=node_id).only("document").first()
    return split_in(row.document if row else None)


def record_split(node_id: int) -> int:
    """Keep ``Gpu.mig_reported_split`` equal to ``still_split`` for the node's GPUs (run
    in the transaction that stored its observed state): the scheduling pass reads the
    column, never the nodes' documents (ADR 0244). Writes only the rows that change;
    how many did."""
    split = still_split(node_id)
    gpus = Gpu.objects.filter(node_id=node_id)
    return (gpus.filter(index__in=split, mig_reported_split=False).update(
        mig_reported_split=True)
        + gpus.exclude(index__in=split).filter(mig_reported_split=True).update(
        mig_reported_split=False))


def ready(lease: Lease) -> bool:
    """Every live instance of a MIG lease has its UUID (a plain lease: always)."""
    if not lease.mig_profile:
        return True
    return not MigInstance.objects.filter(lease=lease, allocation__live=True, uuid="").exists()
