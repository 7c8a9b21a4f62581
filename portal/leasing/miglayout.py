"""The operator's import of a fixed MIG layout (ADR 0238): a mig-parted config file
(``version: v1``, ``mig-configs``), one named config applied to a node (mode ``fixed`` for
all its GPUs that have no mode of their own) or to one GPU (its own override).

All or nothing: a bad file answers 400 naming the field, a layout that would destroy a
leased instance or split a GPU held whole answers 409, and nothing changes. A fixed GPU
is never reconfigured by the scheduler; only a new import changes its layout."""

from __future__ import annotations

from typing import Any

import yaml
from django.db import transaction

from portal.core.errors import ApplicationError, Conflict
from portal.core.services import audit_record
from portal.inventory.models import Gpu, MigMode, Node
from portal.leasing import allocation, desired
from portal.leasing.lifecycle.placing import single_flight
from portal.leasing.models import Allocation, MigInstance

MAX_FILE_CHARS = 256_000


def load(text: str) -> Any:
    """The YAML document of a mig-parted file (400 on ``config`` when it is not YAML)."""
    if len(text) > MAX_FILE_CHARS:
        raise ApplicationError("config: file too large", fields={
            "config": [f"at most {MAX_FILE_CHARS} characters"]})
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ApplicationError(f"config: not YAML ({exc})".replace("\n", " "),
                               fields={"config": ["not a YAML document"]}) from exc


def _layouts(document: Any, name: str, gpus: dict[int, str]
             ) -> dict[int, allocation.FixedLayout]:
    try:
        return allocation.mig_config_layouts(document, name, gpus)
    except allocation.MigLayoutError as exc:
        raise ApplicationError(str(exc), fields={exc.field: [exc.message]}) from exc


def check_not_busy(gpu: Gpu, layout: allocation.FixedLayout, field: str = "name") -> None:
    """409 (on ``field``) when ``layout`` would destroy a live instance of ``gpu`` or split
    it while a whole or fractional lease holds it (the scheduler never does either)."""
    offered = set(layout.instances)
    for profile, start in MigInstance.objects.filter(
            gpu=gpu, allocation__live=True).values_list("profile", "start"):
        if (profile, start) not in offered:
            raise Conflict(f"{gpu}: its {profile} instance at slot {start} is leased and "
                           "not in the new layout", fields={field: [
                               f"GPU {gpu.index} has a leased {profile} at slot {start}"]})
    if layout.enabled and Allocation.objects.filter(gpu=gpu, live=True,
                                                    lease__mig_profile="").exists():
        raise Conflict(f"{gpu}: held whole or by a fraction; MIG waits until it is free",
                       fields={field: [f"GPU {gpu.index} is leased whole"]})


def apply_config(*, actor: Any, node: Node, text: str, name: str,
                 gpu_index: int | None = None) -> dict[str, Any]:
    """Apply config ``name`` of the mig-parted file ``text`` to ``node`` (or only to its
    GPU ``gpu_index``); returns the applied layout per GPU index."""
    document = load(text)
    with transaction.atomic():
        single_flight()  # no scheduling pass places on these GPUs while we check
        node = Node.objects.select_for_update().get(pk=node.pk)
        gpus = {g.index: g for g in node.gpus.order_by("index")}
        layouts = _layouts(document, name, {i: g.model for i, g in gpus.items()})
        if gpu_index is not None:
            if gpu_index not in gpus:
                raise ApplicationError(f"gpu: {node} has no GPU {gpu_index}",
                                       fields={"gpu": [f"no GPU {gpu_index} on {node}"]})
            if gpu_index not in layouts:
                raise ApplicationError(f"gpu: config {name!r} names no GPU {gpu_index}",
                                       fields={"gpu": [f"config {name!r} does not set it"]})
            layouts = {gpu_index: layouts[gpu_index]}
        targets = {i: layout for i, layout in layouts.items()
                   if gpu_index is not None or not gpus[i].mig_mode}
        for index, layout in targets.items():
            check_not_busy(gpus[index], layout)
        wire = {str(i): layout.as_wire() for i, layout in sorted(layouts.items())}
        if gpu_index is None:
            node.mig_mode, node.mig_layout = MigMode.FIXED, {"config": name, "gpus": wire}
            node.save(update_fields=["mig_mode", "mig_layout"])
        else:
            gpu = gpus[gpu_index]
            gpu.mig_mode, gpu.mig_layout = MigMode.FIXED, wire[str(gpu_index)]
            gpu.save(update_fields=["mig_mode", "mig_layout"])
        audit_record(actor=actor, action="node.mig_layout", obj=node,
                     changes={"config": name, "gpu": gpu_index, "gpus": wire})
        desired.push_node(node)
    return {"node": node.hostname, "config": name, "gpu": gpu_index, "gpus": wire}
