"""Desired state for nodes (§6.1) and the fabric manager (§6.2), and the simulated agent."""

from __future__ import annotations

import json
import secrets
from typing import Any

from django.db import IntegrityError, models, transaction

from portal.core import clock
from portal.core.errors import ApplicationError
from portal.core.services import audit_record
from portal.fleet import protocol, wakeup
from portal.fleet.models import (
    Agent,
    FabricDesiredState,
    FabricObservedState,
    NodeDesiredState,
    NodeObservedState,
)
from portal.fleet.models.agents import Role
from portal.fleet.selectors import validation_entry
from portal.inventory.models import Node

FABRIC = "default"


def new_agent_id() -> str:
    return "nd_" + secrets.token_hex(8)


def agent_for_node(*, node: Node) -> Agent:
    """The node's agent identity (its opaque protocol ``node_id``), created on first use."""
    agent = Agent.objects.filter(node=node).first()
    if agent is not None:
        return agent
    try:
        with transaction.atomic():
            return Agent.objects.create(agent_id=new_agent_id(), role=Role.NODE, node=node,
                                        hostname=node.hostname)
    except IntegrityError:
        return Agent.objects.get(node=node)


def _locked(model: type[models.Model], **key: Any) -> Any:
    """``select_for_update`` the row, creating it first if absent (race-safe)."""
    row = model.objects.select_for_update().filter(**key).first()
    if row is not None:
        return row
    try:
        with transaction.atomic():
            model.objects.create(**key)
    except IntegrityError:
        pass
    return model.objects.select_for_update().get(**key)


def _canonical(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True))


def _check(problems: list[protocol.Problem]) -> None:
    if problems:
        raise ApplicationError(
            "Invalid desired state.",
            fields={p["field"]: [p["problem"]] for p in problems}, code="invalid_desired_state")


@transaction.atomic
def node_desired_set(*, node: Node, partitions: list[dict[str, Any]],
                     access_grants: list[dict[str, Any]],
                     mig: list[dict[str, Any]] | None = None) -> int:
    """Make ``partitions``/``access_grants`` the node's complete desired state. The
    generation rises only when the content changes; returns the current generation."""
    agent = agent_for_node(node=node)
    desired = _locked(NodeDesiredState, node=node)
    content = {"partitions": _canonical(partitions), "access_grants": _canonical(access_grants)}
    if mig:  # the MIG layout per GPU the agent keeps (ADR 0222); absent: none managed
        content["mig"] = _canonical(mig)
    asked = validation_entry(node)
    if asked is not None:  # a repaired node proving itself (services.validation)
        content["validation"] = asked
    old = {k: desired.document.get(k) for k in ("partitions", "access_grants", "validation",
                                                "mig")
           if k in content or k in desired.document}
    if desired.document and old == content:
        return int(desired.generation)
    generation = desired.generation + 1
    document = {"protocol": protocol.PROTOCOL_VERSION, "node_id": agent.agent_id,
                "generation": generation, "issued_at": clock.now().isoformat(), **content}
    _check(protocol.validate_desired_state(document, "node"))
    desired.generation, desired.document = generation, document
    desired.save(update_fields=["generation", "document", "updated"])
    wakeup.notify_desired(wakeup.node_key(node.pk))  # delivered when this commits
    audit_record(actor=None, action="fleet.node_desired_set", obj=node,
                 changes={"generation": generation, "partitions": len(partitions),
                          "access_grants": len(access_grants)})
    return generation


@transaction.atomic
def fabric_desired_set(*, partitions: list[dict[str, Any]]) -> int:
    """Make ``partitions`` the fabric manager's complete partition map (§6.2)."""
    desired = _locked(FabricDesiredState, name=FABRIC)
    content = {"partitions": _canonical(partitions)}
    if desired.document and desired.document.get("partitions") == content["partitions"]:
        return int(desired.generation)
    generation = desired.generation + 1
    document = {"protocol": protocol.PROTOCOL_VERSION, "node_id": "",
                "generation": generation, "issued_at": clock.now().isoformat(), **content}
    _check(protocol.validate_desired_state(document, "fabric"))
    desired.generation, desired.document = generation, document
    desired.save(update_fields=["generation", "document", "updated"])
    wakeup.notify_desired(wakeup.FABRIC_KEY)  # delivered when this commits
    audit_record(actor=None, action="fleet.fabric_desired_set", obj=desired,
                 changes={"generation": generation, "partitions": len(partitions)})
    return generation


@transaction.atomic
def simulate_apply(*, node: Node) -> None:
    """A simulated node agent: the observed state becomes the desired one, in sync."""
    # Locked: two concurrent applies must not let the older generation land last.
    desired = NodeDesiredState.objects.select_for_update().filter(node=node).first()
    generation = desired.generation if desired else 0
    doc = desired.document if desired else {}
    observed = {
        "generation_applied": generation, "generation_seen": generation, "apply_errors": [],
        "partitions": [
            {"port_guid": guid, "pkeys": [_member_key(p)], "missing": [], "unexpected": [],
             "in_sync": True}
            for p in doc.get("partitions", []) for guid in p.get("port_guids", [])],
        "access_grants": [{"account": g.get("account"), "lease_id": g.get("lease_id"),
                           "state": "present"} for g in doc.get("access_grants", [])],
        "simulated": True,
    }
    if doc.get("mig"):  # instances "created" with made-up UUIDs, stable per slot
        observed["mig"] = [_simulated_mig(node, gpu) for gpu in doc["mig"]]
    NodeObservedState.objects.update_or_create(
        node=node, defaults={"generation_applied": generation, "partitions_in_sync": True,
                             "document": observed})


def _simulated_mig(node: Node, gpu: dict[str, Any]) -> dict[str, Any]:
    """As the agent reports: MIG on while the GPU holds instances, off (whole use) once
    none are desired (``agents.node.migapply``)."""
    index = gpu["gpu_index"]
    mode = "enabled" if gpu.get("instances") else "disabled"
    return {"gpu_index": index, "mode": mode, "errors": [], "instances": [
        {"profile": i["profile"], "start": i["start"], "gpu_instance_id": i["start"] + 1,
         "uuid": f"MIG-{_sim_uuid(node.pk, index, i['start'], i['profile'])}"}
        for i in gpu.get("instances", [])]}


def _sim_uuid(*parts: Any) -> str:
    import hashlib
    import uuid

    digest = hashlib.sha256(repr(parts).encode()).digest()[:16]
    return str(uuid.UUID(bytes=digest))


@transaction.atomic
def simulate_fabric_apply() -> None:
    """A simulated fabric manager: the desired partition map is applied, no drift."""
    desired = FabricDesiredState.objects.filter(name=FABRIC).first()
    generation = desired.generation if desired else 0
    FabricObservedState.objects.update_or_create(
        name=FABRIC, defaults={"generation_applied": generation, "manager": "simulated",
                               "drift": [], "document": {"generation_applied": generation}})


def _member_key(partition: dict[str, Any]) -> str:
    key = int(partition["pkey"], 16)
    if partition.get("membership", "full") == "full":
        key |= 0x8000
    return f"0x{key:04x}"
