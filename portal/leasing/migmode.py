"""The operator's change of a node's or a GPU's MIG mode (issue 28): the one home for it.

A node or a GPU is switched to ``whole`` or ``dynamic``, or a GPU's own mode is cleared
(``inherit``: it follows its node again). ``fixed`` is the import's
(``portal.leasing.miglayout``, ADR 0238). A busy instance is never destroyed: a change
that leaves a GPU with live MIG instances outside its new mode (whole, or a fixed layout
without them) is a 409 naming the field and the instance, and nothing changes. Switching
to ``dynamic`` keeps live instances (the dynamic placer only splits a free GPU), so
fixed → dynamic and a GPU held whole → dynamic are allowed. Audited with the operator's
reason; the node's desired state is pushed so the agent converges.

The Django admin shows the modes read-only and points here (the admin would bypass the
guard, the reason and the push)."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from portal.core.errors import ApplicationError, Conflict
from portal.core.services import audit_record
from portal.inventory.models import Gpu, MigMode, Node
from portal.leasing import allocation, desired, miglayout
from portal.leasing.lifecycle.placing import single_flight
from portal.leasing.models import MigInstance

INHERIT = "inherit"
MODES = (MigMode.WHOLE.value, MigMode.DYNAMIC.value, INHERIT)
MAX_REASON_CHARS = 250


def _refuse(field: str, message: str) -> ApplicationError:
    return ApplicationError(f"{field}: {message}", fields={field: [message]})


def _check_input(node: Node, mode: str, gpu_index: int | None, reason: str) -> None:
    """400 naming the field for a mode, GPU or reason that cannot be applied."""
    if mode == MigMode.FIXED:
        raise _refuse("mode", "a fixed layout is imported: POST /api/v1/fleet/nodes/"
                              f"{node.hostname}/mig-layout with a mig-parted config")
    if mode not in MODES:
        raise _refuse("mode", f"one of {', '.join(MODES)}")
    if mode == INHERIT and gpu_index is None:
        raise _refuse("mode", "inherit clears a GPU's own mode: name the GPU with gpu")
    if not reason.strip() or len(reason) > MAX_REASON_CHARS:
        raise _refuse("reason", f"say why, in 1 to {MAX_REASON_CHARS} characters")


def _live_instance(gpu: Gpu) -> MigInstance | None:
    return MigInstance.objects.filter(gpu=gpu, allocation__live=True).order_by("start").first()


def check_gpu(gpu: Gpu, own_mode: str, own_layout: Any, node_mode: str,
              node_layout: Any) -> None:
    """409 (on ``mode``) when ``gpu`` in its new state (its own mode and layout, its
    node's) would lose a live MIG instance; dynamic keeps them all."""
    effective = own_mode or node_mode
    if effective == MigMode.DYNAMIC:
        return
    layout = allocation.fixed_layout(own_mode, own_layout, node_mode, node_layout, gpu.index)
    if layout is not None:
        miglayout.check_not_busy(gpu, layout, field="mode")
        return
    busy = _live_instance(gpu)
    if busy is not None:
        raise Conflict(
            f"{gpu}: its {busy.profile} instance at slot {busy.start} is leased "
            f"(lease {busy.lease_id}); whole waits until it is released",
            fields={"mode": [f"GPU {gpu.index} holds a leased {busy.profile} at slot "
                             f"{busy.start} (lease {busy.lease_id})"]})


def _node_change(node: Node, gpus: dict[int, Gpu], mode: str) -> None:
    for gpu in gpus.values():
        if not gpu.mig_mode:  # a GPU with a mode of its own keeps it
            check_gpu(gpu, "", {}, mode, {})
    node.mig_mode, node.mig_layout = mode, {}
    node.save(update_fields=["mig_mode", "mig_layout"])


def _gpu_change(node: Node, gpu: Gpu, mode: str) -> None:
    own = "" if mode == INHERIT else mode
    check_gpu(gpu, own, {}, node.mig_mode, node.mig_layout)
    gpu.mig_mode, gpu.mig_layout = own, {}
    gpu.save(update_fields=["mig_mode", "mig_layout"])


def _was(node: Node, gpu: Gpu | None) -> dict[str, Any]:
    part: Node | Gpu = node if gpu is None else gpu
    return {"mode": part.mig_mode, "layout": part.mig_layout}


def _effective_modes(node: Node) -> list[dict[str, Any]]:
    return [{"index": index, "mode": own or node.mig_mode, "own": bool(own)}
            for index, own in node.gpus.order_by("index").values_list("index", "mig_mode")]


def change_mode(*, actor: Any, node: Node, mode: str, reason: str,
                gpu_index: int | None = None) -> dict[str, Any]:
    """Switch ``node`` (or only its GPU ``gpu_index``) to ``mode`` (whole, dynamic; for a
    GPU also inherit). All or nothing; returns each GPU's mode in force."""
    _check_input(node, mode, gpu_index, reason)
    with transaction.atomic():
        single_flight()  # no scheduling pass places an instance while we check
        node = Node.objects.select_for_update().get(pk=node.pk)
        gpus = {g.index: g for g in node.gpus.order_by("index")}
        if gpu_index is not None and gpu_index not in gpus:
            raise _refuse("gpu", f"no GPU {gpu_index} on {node}")
        gpu = None if gpu_index is None else gpus[gpu_index]
        was = _was(node, gpu)
        if gpu is None:
            _node_change(node, gpus, mode)
        else:
            _gpu_change(node, gpu, mode)
        audit_record(actor=actor, action="node.mig_mode", obj=node,
                     changes={"gpu": gpu_index, "from": was, "to": mode,
                              "reason": reason.strip()})
        desired.push_node(node)
    return {"node": node.hostname, "gpu": gpu_index, "mode": mode,
            "gpus": _effective_modes(node)}
