"""Applies a node's desired state idempotently and describes what it observed.

Grants end on the agent too: a grant whose ``not_after`` has passed is removed by
``expire_grants`` (called from the agent's loop, portal reachable or not) and is never
re-created from a stale desired state. Tearing a grant down cleans its GPUs
(``cleaning.py``). A desired ``validation`` with a new id starts a validation run
(``validate.py``, in its own thread); its result is in observed state. ``converged()``
re-reads what the node waits for (P_Key tables in sysfs, IPoIB children, grants) so the
agent can report the moment it converges.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from agents.node.access import AccessManager, Grant
from agents.node.cleaning import GpuCleaner
from agents.node.ipoib import IpoibManager
from agents.node.migapply import Device, MigApplier, devices_from_wire, layout_from_wire
from agents.node.partitions import check_partitions
from agents.node.validate import NodeValidator
from agents.nvml.mig import MigInstance
from agents.sysfs.infiniband import IbDevice, InfinibandCollector

log = logging.getLogger("agents.node.apply")


class NodeApplier:
    def __init__(self, ib: InfinibandCollector, access: AccessManager,
                 ipoib: IpoibManager | None = None, ipoib_parent: str = "ib0",
                 cleaner: GpuCleaner | None = None,
                 wall: Callable[[], float] = time.time,
                 validator: NodeValidator | None = None,
                 mig: MigApplier | None = None) -> None:  # fmt: skip
        self.ib, self.access, self.ipoib, self.ipoib_parent = ib, access, ipoib, ipoib_parent
        self.cleaner, self.wall, self.validator, self.mig = cleaner, wall, validator, mig
        self.mig_grants: dict[str, tuple[Device, ...]] = {}  # account -> its MIG devices
        self.mig_cleaning: list[dict[str, Any]] = []  # latest per-instance teardown checks
        self._lock = threading.RLock()
        self.generation_applied = 0
        self.generation_seen = 0
        self.desired: dict[str, Any] = {"partitions": [], "access_grants": []}
        self.errors: list[dict[str, str]] = []
        self.last_devices: list[IbDevice] | None = None  # latest sample's, to avoid re-reading
        self.cleaning: dict[int, dict[str, Any]] = {}  # gpu index -> latest teardown check

    def observe_devices(self, devices: list[IbDevice]) -> None:
        self.last_devices = devices

    def apply(self, desired: dict[str, Any]) -> None:
        with self._lock:  # long-poll thread applies while the loop reports
            self._apply(desired)

    def _apply(self, desired: dict[str, Any]) -> None:
        generation = int(desired["generation"])
        self.generation_seen = max(self.generation_seen, generation)
        if generation < self.generation_applied:
            return  # stale
        self.desired = desired
        self.errors = []
        self._revoke_unwanted()
        self._try("mig", self._mig)  # instances before the grants that use them
        self._grants()
        self._ipoib(desired.get("partitions", []))
        if self.validator is not None:
            self.validator.request(desired.get("validation"))
        self.last_devices = self.ib.partitions_view()  # the report after shows this moment
        if not self.errors:
            self.generation_applied = generation
        log.info("desired state applied", extra={"generation": generation,
                                                 "errors": len(self.errors)})  # fmt: skip

    def _wanted(self) -> dict[str, Grant]:
        now = self.wall()
        grants = (Grant.from_wire(g) for g in self.desired.get("access_grants", []))
        return {g.account: g for g in grants if not g.expired(now)}

    def _revoke_unwanted(self) -> None:
        wanted = self._wanted()
        for account in set(self.access.present()) - set(wanted):
            self._try(f"access_grants/{account}/revoke", lambda a=account: self._teardown(a))

    def _grants(self) -> None:
        wanted = self._wanted()
        for wire in self.desired.get("access_grants", []):
            devices = devices_from_wire(wire) if isinstance(wire, dict) else ()
            if devices:
                self.mig_grants[str(wire.get("account"))] = devices
        for account, grant in wanted.items():
            for index in grant.gpu_indices:
                self.cleaning.pop(index, None)  # handed out again: the old check is history
            self._try(f"access_grants/{account}",
                      lambda g=grant: self.access.apply(self._with_mig_access(g)))

    def _mig(self) -> None:
        layout = layout_from_wire(self.desired.get("mig"))
        if self.mig is None:
            if any(layout.values()):
                raise RuntimeError("MIG instances asked, but this agent has no MIG support")
            return
        self.errors += self.mig.apply(layout)

    def _with_mig_access(self, grant: Grant) -> Grant:
        """A MIG grant reaches its instances only: their capability nodes in its device
        allow-list, their UUIDs in ``CUDA_VISIBLE_DEVICES``. Until every instance is made
        it gets neither (the parent GPU alone opens no MIG device), and an instance gone
        takes its nodes with it at the next apply."""
        devices = self.mig_grants.get(grant.account, ())
        if not devices or self.mig is None:
            return grant
        instances = self.mig.instances_of(devices)
        if instances is None:
            return dataclasses.replace(grant, mig_caps=())
        env = dict(grant.environment)
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i.uuid) for i in instances)
        return dataclasses.replace(grant, environment=tuple(sorted(env.items())),
                                   mig_caps=self.mig.access_for(instances))

    def _teardown(self, account: str) -> None:
        """Revoke the grant (ends the account's processes), then clean its GPUs; a MIG
        grant's instances are cleaned one by one, and a GPU under MIG management is never
        cleaned whole (its other instances are other tenants')."""
        lease_id = self.access.present().get(account, "")
        indices = list(getattr(self.access, "gpu_indices", lambda a: [])(account))
        devices = self.mig_grants.pop(account, ())
        self.access.revoke(account)
        managed = set(self.mig.desired) | set(self.mig.results) if self.mig else set()
        managed |= {d[0] for d in devices}
        if devices and self.mig is not None:
            self.mig_cleaning = self.mig.clean(devices)
        indices = [i for i in indices if i not in managed]
        if self.cleaner is not None and indices:
            for result in self.cleaner.clean(lease_id, indices):
                self.cleaning[int(result["gpu_index"])] = result

    def expire_grants(self) -> bool:
        """Remove every present grant whose ``not_after`` has passed; True if any was."""
        with self._lock:
            wanted = self._wanted()
            gone = [a for a in self.access.present() if a not in wanted]
            for account in gone:
                log.info("grant expired on the agent", extra={"account": account})
                self._try(f"access_grants/{account}/expire", lambda a=account: self._teardown(a))
            return bool(gone)

    def next_expiry(self) -> float | None:
        """Wall-clock time of the next ``not_after`` among the grants still present."""
        with self._lock:
            present = self.access.present()
            times = [g.not_after for g in self._wanted().values()
                     if g.not_after is not None and g.account in present]  # fmt: skip
            return min(times) if times else None

    def _ipoib_wanted(self, partitions: list[dict[str, Any]]) -> set[int]:
        mine = {p.port_guid for d in self.ib.partitions_view() for p in d.ports if p.port_guid}
        return {
            int(p["pkey"], 16) | 0x8000
            for p in partitions
            if p.get("ipoib") and mine & set(p.get("port_guids", []))
        }

    def _ipoib(self, partitions: list[dict[str, Any]]) -> None:
        if self.ipoib is None:
            return
        want = self._ipoib_wanted(partitions)
        parent, mgr = self.ipoib_parent, self.ipoib
        have = set(mgr.children(parent).values())
        for pkey in sorted(have - want):
            self._try(f"ipoib/{pkey:#06x}/remove", lambda k=pkey: mgr.remove(parent, k))
        for pkey in sorted(want - have):
            self._try(f"ipoib/{pkey:#06x}", lambda k=pkey: mgr.create(parent, k))

    def _try(self, item: str, fn: Any) -> None:
        try:
            fn()
        except Exception as exc:  # any failure becomes an apply error, never a crash
            log.error("apply failed", extra={"item": item, "error": str(exc)})
            self.errors.append({"item": item, "message": f"{type(exc).__name__}: {exc}"})

    def converged(self) -> bool:
        """Re-read sysfs, IPoIB children and grants: does the node match its desired
        state now? (Also refreshes the devices the next report shows.)"""
        with self._lock:
            self.last_devices = self.ib.partitions_view()
            if self.errors or self.generation_applied < self.generation_seen:
                return False
            ports = check_partitions(self.last_devices, self.desired)
            if not all(p["in_sync"] for p in ports):
                return False
            if self.ipoib is not None:
                want = self._ipoib_wanted(self.desired.get("partitions", []))
                if set(self.ipoib.children(self.ipoib_parent).values()) != want:
                    return False
            if self.mig is not None and not self.mig.converged():
                return False
            return set(self.access.present()) == set(self._wanted())

    def mig_instances(self) -> list[MigInstance]:
        """The node's MIG instances now (for ``/metrics``), read under the apply lock."""
        with self._lock:
            return self.mig.sample_instances() if self.mig is not None else []

    def observed(self) -> dict[str, Any]:
        with self._lock:
            return self._observed()

    def _observed(self) -> dict[str, Any]:
        children: list[dict[str, Any]] = []
        if self.ipoib is not None:
            kids = sorted(self.ipoib.children(self.ipoib_parent).items())
            children = [
                {"parent": self.ipoib_parent, "name": n, "pkey": f"0x{k:04x}"} for n, k in kids
            ]
        observed: dict[str, Any] = {
            "generation_applied": self.generation_applied,
            "generation_seen": self.generation_seen,
            "apply_errors": list(self.errors),
            "partitions": check_partitions(
                self.last_devices if self.last_devices is not None
                else self.ib.partitions_view(),
                self.desired,
            ),
            "ipoib_children": children,
            "access_grants": [
                {"account": a, "lease_id": lease, "state": "present"}
                for a, lease in sorted(self.access.present().items())
            ],
        }
        if self.cleaning:
            observed["gpu_cleaning"] = [dict(r) for _, r in sorted(self.cleaning.items())]
        if self.mig is not None and self.mig.results:
            observed["mig"] = self.mig.observed()
        if self.mig_cleaning:
            observed["mig_cleaning"] = [dict(r) for r in self.mig_cleaning]
        validation = self.validator.result if self.validator is not None else None
        if validation is not None:
            observed["validation"] = validation
        return observed
